"""Aggregation protocols (secure aggregation, later Paillier weighting): pure, Ray-free code."""
