"""Where the tests find the repository and the data cache."""
from __future__ import annotations

from pathlib import Path

from privsilo.simulator.data.types import default_data_dir

REPO = Path(__file__).resolve().parents[2]
# The quickstart scenario the README runs first.
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
# The cache `privsilo data fetch heart_disease` fills (PRIVSILO_DATA_DIR or ~/.cache/privsilo).
HEART_DISEASE_DIR = default_data_dir() / "heart_disease"
