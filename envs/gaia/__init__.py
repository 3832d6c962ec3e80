"""GAIA: the user's own copy of the benchmark's data, and the benchmark's answer-scoring rules."""
