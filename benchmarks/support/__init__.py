"""Benchmarks: support."""
