"""Where Baton meets the world: GitHub's API, Redis, git and the job queue."""
