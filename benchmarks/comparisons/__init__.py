"""Benchmarks: comparisons."""
