"""Each workflow loads its facts, asks the domain for a plan, and performs it."""
