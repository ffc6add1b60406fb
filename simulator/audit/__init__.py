"""Empirical privacy auditing: canaries in, a statistically valid lower bound (and an estimate) of epsilon out."""
