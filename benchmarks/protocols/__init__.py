"""Benchmarks: protocols."""
