"""Every shipped grid (scenarios/**/*_grid.yaml) goes through `privsilo sweep`: the first label of every axis,
one seed, reduced rounds and silos, on real Ray actors and data. Grids whose data needs a download (mnist:
`privsilo data fetch mnist`) or a Debian package (fashion_mnist) are checked cell by cell without their data
(the scenario part of `privsilo validate`)."""
from __future__ import annotations

import csv
import math

import pytest

from privsilo.simulator.cli import main
from privsilo.simulator.experiments.sweep import load_grid
from tests.support.paths import REPO

SCENARIOS = REPO / "scenarios"
FAST = ["federation.rounds=1", "federation.local_steps=2"]
RUN = {  # grid -> the --set overrides that make its first cell take seconds
    # The other grids' actor shape (0.5 CPU, the default; resources only place actors): the session's idle actors
    # then serve every grid here, instead of new worker processes for this one and again for the next.
    "dprivacy/synthetic_linear_grid.yaml": ["federation.rounds=2", "data.silos=4", "federation.client_rate=0.5",
                                            "resources.silo.num_cpus=0.5", "resources.server.num_cpus=0.5"],
    "dprivacy/rotated_mnist_grid.yaml": ["federation.rounds=1", "data.silos=4", "data.max_records_per_silo=50"],
    "rpdp/heart_disease_grid.yaml": FAST,
    "uldp/heart_disease_grid.yaml": FAST,
    "uldp/heart_disease_sampling_grid.yaml": FAST,
}
OFFLINE_UNAVAILABLE = [  # mnist or fashion_mnist
    "attacks/mnist_defences_grid.yaml", "pldp/fashion_mnist_grid.yaml", "pldp/mnist_grid.yaml", "rpdp/mnist_iid_grid.yaml",
    "rpdp/mnist_noniid_grid.yaml", "uldp/mnist_grid.yaml", "uldp/mnist_sampling_grid.yaml",
]


def test_every_shipped_grid_is_covered_here():
    shipped = {str(p.relative_to(SCENARIOS)) for p in SCENARIOS.rglob("*_grid.yaml")}
    assert shipped == set(RUN) | set(OFFLINE_UNAVAILABLE)


@pytest.mark.parametrize("name", sorted(RUN))
def test_the_first_cell_of_a_shipped_grid_sweeps(name, ray_local, heart_disease_dir, tmp_path, capsys):
    path = SCENARIOS / name
    grid = load_grid(path)
    only = [f"--only={axis}={next(iter(labels))}" for axis, labels in grid.axes.items()]
    heart = [f"data.path={heart_disease_dir}"] if grid.base["data"]["dataset"] == "heart_disease" else []
    sets = [f"--set={item}" for item in [*RUN[name], *heart]]
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--seeds", "0,", "--no-progress", *only, *sets]) == 0, capsys.readouterr().err
    table = (out / "table.md").read_text()
    assert "nan" not in table.lower() and (out / "comparison.png").is_file()
    with (out / "table.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    if grid.base["data"]["dataset"] == "synthetic_linear":  # regression: the test MSE, never an accuracy
        assert "test MSE" in table and "accuracy" not in table.splitlines()[0]
        assert row["accuracy_mean"] == "" and math.isfinite(float(row["loss_mean"]))
        assert (out / "mse_per_round.png").is_file()
    else:
        assert 0.0 <= float(row["accuracy_mean"]) <= 1.0
    if grid.base["mechanism"]["name"] == "dprivacy":  # personalised: the runs kept, cluster recovery and leakage
        assert "cluster recovery" in table and "leakage" in table
        assert len(list((out / "runs").iterdir())) == 1
        assert all((out / plot).is_file() for plot in ("accuracy_vs_nu.png", "leakage.png", "hypotheses.png"))


@pytest.mark.parametrize("name", OFFLINE_UNAVAILABLE)
def test_every_cell_of_a_grid_on_downloaded_data_validates(name):
    grid = load_grid(SCENARIOS / name)
    scenarios = [grid.scenario(labels, seed) for labels in grid.combinations() for seed in grid.seeds]
    assert {s.data.dataset for s in scenarios} <= {"mnist", "fashion_mnist"}
