"""A run's output directory: ownership, naming and lock, lifecycle, checkpoints, the files written,
tracking."""
