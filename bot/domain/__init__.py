"""Baton's decisions and vocabulary: pure functions over pydantic models, no I/O."""
