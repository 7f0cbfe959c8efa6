"""Benchmarks against peers: python -m bench NAME. Results go to bench/RESULTS.md."""
