"""The local stack, the demo and its scripted agent and maintainer."""
