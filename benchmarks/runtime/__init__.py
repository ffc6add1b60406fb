"""Benchmarks: runtime."""
