"""Running Baton: settings, logs, metrics, the CLI, the clock, the worker, doctor and setup."""
