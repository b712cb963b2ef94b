"""Build helpers shared by make targets, tests and benchmarks (not shipped)."""
