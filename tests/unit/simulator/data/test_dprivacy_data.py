"""``dprivacy`` scenarios: bad input exits 2 naming the field; rotated images and Galli et al.'s synthetic task
give every record its true group; cluster recovery against hand-counted examples."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from privsilo.simulator.cli import main
from privsilo.simulator.data import load_dataset
from privsilo.simulator.data.rotations import rotate_silos
from privsilo.simulator.data.synthetic import THETAS, load_synthetic_linear
from privsilo.simulator.personalisation.evaluation import cluster_recovery, contingency


def _scenario(tmp_path, **changes):
    raw = {
        "name": "dp",
        "data": {"dataset": "synthetic_linear", "partition": "natural", "silos": 6},
        "model": {"name": "linear_regression"},
        "mechanism": {"name": "dprivacy", "hypotheses": 2, "nu": 5.0, "radius": 1.0},
    }
    for key, value in changes.items():
        block, _, leaf = key.partition("__")
        raw.setdefault(block, {})
        if value is None:
            raw[block].pop(leaf, None)
        else:
            raw[block][leaf] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize(("changes", "field", "allowed"), [
    ({"mechanism__nu": -1.0}, "mechanism.nu: got -1.0", "or exactly 0 for the no-noise baseline"),
    ({"mechanism__hypotheses": 0}, "mechanism.hypotheses: got 0", "greater than or equal to 1"),
    ({"mechanism__hypotheses": 7}, "mechanism.hypotheses: got 7", "must not exceed the number of clients data.silos = 6"),
    ({"mechanism__radius": 0.0}, "mechanism.radius: got 0.0", "greater than 0"),
    ({"mechanism__radius": None}, "mechanism.radius: got null", "calibration 'clipped' needs a public clip radius"),
    ({"mechanism__calibration": "exact"}, "mechanism.calibration: got 'exact'", "must be one of clipped, paper"),
    ({"protocol__secure_aggregation": True}, "protocol.secure_aggregation: got true", "needs individual updates"),
    ({"mechanism__name": "dp_sgd", "mechanism__hypotheses": None, "mechanism__nu": None, "mechanism__radius": None},
     "mechanism.name: got 'dp_sgd'", "regression task; mechanisms for it: dprivacy, none"),
    ({"model__name": "mlp"}, "model.name: got 'mlp'", "use linear_regression"),
    ({"data__partition": "iid"}, "data.partition: got 'iid'", "one user of 10 records per silo; use natural"),
    ({"data__rotations": [0, 90]}, "data.rotations: got [0, 90]", "need an image dataset"),
])
def test_bad_input_exits_2_naming_the_field(tmp_path, capsys, changes, field, allowed):
    assert main(["validate", _scenario(tmp_path, **changes)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"privsilo: error: {field}; ") and allowed in err


@pytest.mark.parametrize(("rotations", "silos", "allowed"), [
    ([0, 45], 4, "among 0, 90, 180, 270"), ([90, 90], 4, "distinct"), ([0, 90, 180], 2, "more angles than data.silos = 2"),
])
def test_bad_rotations_exit_2(tmp_path, capsys, rotations, silos, allowed):
    path = _scenario(tmp_path, data__dataset="digits", data__partition="iid", data__silos=silos, data__rotations=rotations,
                     model__name="logistic_regression", mechanism__hypotheses=1)
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"privsilo: error: data.rotations: got {rotations}; ") and allowed in err


def test_the_no_noise_baseline_and_the_paper_calibration_validate(tmp_path, capsys):
    assert main(["validate", _scenario(tmp_path, mechanism__nu=0.0)]) == 0
    assert main(["validate", _scenario(tmp_path, mechanism__calibration="paper", mechanism__radius=None)]) == 0
    assert "valid (dprivacy on synthetic_linear, 6 silos" in capsys.readouterr().out


def test_rotated_silos_and_the_replicated_test_set():
    data = load_dataset("digits", seed=0)
    parts = [np.arange(0, 5), np.arange(5, 9), np.arange(9, 14)]
    rotated = rotate_silos(data, parts, angles=[0, 90])
    for silo, records in enumerate(parts):  # silo i: angle i mod 2, counter-clockwise
        want = data.x_train[records] if silo % 2 == 0 else np.rot90(data.x_train[records], 1, axes=(2, 3))
        np.testing.assert_array_equal(rotated.x_train[records], want)
        assert (rotated.train_groups[records] == silo % 2).all()
    assert rotated.x_train[0, 0, 0, -1] == data.x_train[0, 0, 0, -1]  # silo 0 untouched
    np.testing.assert_array_equal(rotated.x_train[5, 0, -1, 0], data.x_train[5, 0, 0, 0])  # top-left went bottom-left
    n = len(data.y_test)
    assert len(rotated.y_test) == 2 * n and (rotated.y_test[n:] == data.y_test).all()
    assert rotated.test_groups.tolist() == [0] * n + [1] * n and rotated.group_names == ("0 deg", "90 deg")
    np.testing.assert_array_equal(rotated.x_test[n:], np.rot90(data.x_test, 1, axes=(2, 3)))


def test_synthetic_linear_users_follow_their_linear_model():
    data = load_synthetic_linear(users=6, seed=2)
    assert len(data.natural_partition) == 6 and all(len(p) == 10 for p in data.natural_partition)
    assert data.kind == "regression" and data.y_train.dtype == np.float32 and data.feature_shape == (2,)
    for user, records in enumerate(data.natural_partition):
        group = user % 2
        assert (data.train_groups[records] == group).all()
        noise = data.y_train[records] - data.x_train[records] @ THETAS[group]
        assert noise.min() >= -1e-5 and noise.max() < 1 + 1e-5  # y = x.theta_g + U[0, 1)
    assert np.bincount(data.test_groups).tolist() == [500, 500]
    again = load_synthetic_linear(users=6, seed=2)
    assert np.array_equal(again.x_train, data.x_train) and not np.array_equal(load_synthetic_linear(users=6, seed=3).x_train, data.x_train)


def test_cluster_recovery_is_the_purity_of_the_hypotheses():
    groups = np.array([0, 0, 0, 1, 1, 1])
    assert cluster_recovery(np.array([1, 1, 1, 0, 0, 0]), groups) == 1.0  # labels may be permuted
    assert cluster_recovery(np.array([0, 0, 0, 0, 0, 0]), groups) == 0.5  # one hypothesis for both groups
    assert cluster_recovery(np.array([0, 0, 1, 1, 1, 1]), groups) == pytest.approx(5 / 6)  # hyp 1: 1 of group 0, 3 of group 1
    assert contingency(np.array([0, 0, 1, 1, 1, 1]), groups, num_hypotheses=3, num_groups=2).tolist() == [[2, 0], [1, 3], [0, 0]]


def test_grid_table_averages_the_seeds_of_each_combination(tmp_path):
    from privsilo.simulator.experiments.personalised_report import GridRun, markdown_table, table_rows

    def finished(name, seed, *, accuracy, recovery, leak_max):
        directory = tmp_path / name
        directory.mkdir()
        summary = {
            "config": {"mechanism": {"nu": 3.0, "hypotheses": 2, "calibration": "clipped"}},
            "personalisation": {"accuracy": accuracy, "loss": 0.5, "cluster_recovery": recovery},
            "privacy": {"leakage": {"max_per_participation": 40.0, "max": leak_max, "median": leak_max / 2}},
        }
        (directory / "summary.json").write_text(__import__("json").dumps(summary))
        return GridRun({"mechanism.nu": "nu3"}, seed, directory)

    runs = [finished("a", 0, accuracy=0.8, recovery=1.0, leak_max=400.0), finished("b", 1, accuracy=0.6, recovery=0.5, leak_max=200.0)]
    (row,) = table_rows(runs, axes=["mechanism.nu"])
    assert row["seeds"] == 2 and row["accuracy_mean"] == pytest.approx(0.7) and row["accuracy_std"] == pytest.approx(0.1)
    assert row["cluster_recovery_mean"] == 0.75 and row["leakage_max_mean"] == 300.0 and row["leakage_median_mean"] == 150.0
    assert "| nu3 | 2 | 0.700 ± 0.100 | 0.75 | 40 | 300 | 150 |" in markdown_table([row], axes=["mechanism.nu"])
