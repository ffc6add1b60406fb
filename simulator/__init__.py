"""privsilo simulator: Ray actors, round loop, scenarios, datasets, models, CLI and reports."""
import os

# Before anything imports Ray: no auth warning for local sessions, no usage-stats prompt (machines are offline).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
