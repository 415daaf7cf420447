"""Each workflow decision as a pure function from facts to a plan."""
