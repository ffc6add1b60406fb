"""privsilo simulator: Ray actors, round loop, scenarios, datasets, models, CLI and reports."""
