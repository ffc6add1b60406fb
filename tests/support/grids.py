"""A tiny sweep grid written to a directory, for the sweep tests."""
from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.scenarios import small_scenario


def write_grid(directory: Path, **changes) -> Path:
    """A tiny rPDP grid on digits (2 silos, 2 rounds, 2 seeds, 2 variants) as ``directory/grid.yaml`` and its base
    scenario ``directory/base.yaml``; keyword entries replace the grid's. Returns the grid's path."""
    base = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 2},
        federation={"rounds": 2, "client_rate": 1.0, "local_steps": 2, "batch_size": 32, "lr": 0.1},
        mechanism={"name": "rpdp"},
        # The actor shape of the shipped scenarios (0.5 CPU, the default) that the CLI and grid tests run: the
        # session's idle actors host these runs too instead of new worker processes (resources only place actors).
        resources={"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}},
    )
    (directory / "base.yaml").write_text(yaml.safe_dump(base))
    grid = {
        "name": "tiny",
        "base": "base.yaml",
        "seeds": [0, 1],
        "axes": {
            "mechanism.budgets": {"ThreeLevels": {"distribution": "three_levels"}},
            "mechanism.variant": {"rPDP": "rpdp", "Minimum": "minimum"},
        },
        **changes,
    }
    path = directory / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path
