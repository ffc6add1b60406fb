"""Benchmarks: mechanisms."""
