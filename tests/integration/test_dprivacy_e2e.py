"""``dprivacy`` end to end through real Ray actors: rotated digits, 4 clients, 2 hypotheses, 2 rounds. The server
clusters the individual uploads it received, the per-client leakage is the hand-computed 2n/nu per
participation, and the run reports every client's hypothesis, accuracy and true group."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from privsilo.mechanisms.dprivacy.ifca import kmeans
from privsilo.simulator.engine import Federation, run
from tests.support.scenarios import small_scenario

NU, RADIUS = 5.0, 1.0
DIGITS_LOGREG_PARAMETERS = 64 * 10 + 10


def _scenario(silos: int = 4) -> dict:
    return small_scenario(
        name="dprivacy_e2e",
        data={"dataset": "digits", "partition": "iid", "silos": silos, "rotations": [0, 180]},
        federation={"rounds": 2, "client_rate": 1.0, "local_steps": 5, "batch_size": 32, "lr": 0.1},
        mechanism={"name": "dprivacy", "hypotheses": 2, "nu": NU, "radius": RADIUS, "local_epochs": 1},
    )


def test_server_clusters_the_individual_uploads(ray_local):
    with Federation(_scenario(silos=2)) as federation:
        before = federation.global_state()
        assert len(before) == 2 and not np.array_equal(before[0], before[1])  # two seeded initialisations
        report = federation.run_round(0)
        uploads = federation.server_inbox()
        after = federation.global_state()
    assert report.participants == (0, 1)
    vectors = np.stack([uploads[i].values for i in report.participants])
    _, want = kmeans(vectors, initial_centres=np.stack(before))
    np.testing.assert_array_equal(np.stack(after), want)
    assert all(e.calibration == "clipped" and e.epsilon == DIGITS_LOGREG_PARAMETERS / (NU * RADIUS) for es in report.events.values() for e in es)


def test_run_reports_leakage_and_personalised_evaluation(ray_local, tmp_path):
    run(_scenario(), out_dir=tmp_path / "out")
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    leakage = summary["privacy"]["leakage"]
    per_participation = 2 * DIGITS_LOGREG_PARAMETERS / NU  # 2n / nu
    assert leakage["max_per_participation"] == pytest.approx(per_participation, rel=1e-12)
    for client in map(str, range(4)):  # client_rate 1: every client took part in both rounds
        assert leakage["per_client"][client]["participations"] == 2
        assert leakage["per_client"][client]["total"] == pytest.approx(2 * per_participation, rel=1e-12)
    assert leakage["max"] == leakage["median"] == pytest.approx(2 * per_participation, rel=1e-12)
    assert summary["privacy"]["epsilon"] is None
    personal = summary["personalisation"]
    assert personal["hypotheses"] == 2 and personal["groups"] == ["0 deg", "180 deg"]
    assert np.array(personal["contingency"]).sum() == 4 and 0.5 <= personal["cluster_recovery"] <= 1.0
    assert [c["group"] for c in personal["per_client"]] == ["0 deg", "180 deg", "0 deg", "180 deg"]
    with (out / "metrics.csv").open() as handle:
        last = list(csv.DictReader(handle))[-1]
    assert float(last["accuracy"]) == pytest.approx(personal["accuracy"])  # the clients' mean, not hypothesis 0
    with (out / "clients.csv").open() as handle:
        clients = list(csv.DictReader(handle))
    assert [float(c["leakage_total"]) for c in clients] == pytest.approx([2 * per_participation] * 4)
    with (out / "hypotheses.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 2 * 2 * 2  # rounds x hypotheses x groups
    assert {"hypotheses.png", "leakage.png", "hypotheses.pt"} <= {p.name for p in out.iterdir()}
