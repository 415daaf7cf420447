"""The web process: webhook ingress, the status page and its overview."""
