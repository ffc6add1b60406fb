"""privsilo's benchmarks, by what they measure; run them from the repository root
as modules (``python -m benchmarks.<group>.<script>``)."""
