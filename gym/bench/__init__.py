"""The gym's benchmarks (`python -m gym bench`): never imported by library code."""
