"""Silos whose worker process dies mid-run (``faults``): real process exits, Ray restarts, snapshots, survivors.

Every crash here is a real ``os._exit`` of a Ray worker process. The checks: the run finishes; the round's model is
the one the surviving uploads give (the same crash under secure aggregation and under the plain sum gives the
same model, to the encoding's precision); crashed silos come back and upload again; what each silo believes it
spent (from its own snapshot) equals what the server's accountant charged it, and no rPDP record exceeds its
budget.
"""
from __future__ import annotations

import collections
import csv
import functools
import json
import os
import time

import numpy as np
import pytest
import ray
import torch

from privsilo.simulator.run_dir.checkpoint import read_checkpoint
from privsilo.simulator.engine import run
from privsilo.simulator.engine.faults import CRASH_POINTS, crash_plan
from privsilo.simulator.run_dir.writers import summary
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.engine.snapshots import load_by_reference
from tests.support.scenarios import DP_SGD, LOCAL_STEPS, ONE_SILO_PER_WORKER, faults_scenario as _scenario
from tests.support.faulty_servers import ServerLosingAWorkerInSetUp, ServerLosingAWorkerThatComesBackInSetUp

RPDP = {"name": "rpdp", "budgets": {"distribution": "three_levels"}, "delta": 1e-3}


def _silo_states(checkpoint_dir) -> dict:
    """Every silo as its last snapshot describes it (records and model parameters, which it does not hold, left out)."""
    blobs = read_checkpoint(checkpoint_dir)["silos"]
    return {silo: load_by_reference(blob, collections.defaultdict(lambda: None)) for silo, blob in blobs.items()}


def _crashes(at: str) -> list[dict]:
    """Silo 1 crashes at ``at`` in round 2, silo 3 before its upload in round 3."""
    return [{"silo": 1, "round": 2, "at": at}, {"silo": 3, "round": 3, "at": "before_upload"}]


@functools.lru_cache(maxsize=None)
def _plain_run(at: str):
    """The plain-sum run with :func:`_crashes` (shared by the tests below; needs the ``ray_local`` session)."""
    return run(_scenario(DP_SGD, _crashes(at)))


@pytest.mark.parametrize("at", CRASH_POINTS)
def test_a_crashed_silo_drops_out_of_its_round_and_comes_back(ray_local, at):
    result = _plain_run(at)
    reports = [record.report for record in result.rounds]
    assert [r.dropped for r in reports] == [(), (1,), (3,), ()]
    assert reports[1].crashed_workers and not any(r.abandoned for r in reports)
    # the crashed silos upload again in the next rounds (their events reach the accountant)
    assert 1 in reports[2].events and {1, 3} <= set(reports[3].events)
    # after an upload the silo was charged for the round; before it, nothing was released and nothing charged
    assert (1 in reports[1].events) == (at == "after_upload") and 3 not in reports[2].events
    assert result.failures == {"crashes": 2, "restarts": 2, "silos_dropped": 2, "rounds_with_dropouts": 2, "rounds_abandoned": 0}


@pytest.mark.parametrize("at", CRASH_POINTS)
def test_each_silos_epsilon_after_crashes_is_opacus_for_the_rounds_it_uploaded(ray_local, at):
    """The rule under failure, against an independent accountant: each silo's epsilon is Opacus' RDP accountant for
    its uploads, counted from the crashes (silo 1 uploads in round 2 only when it crashes after uploading; silo 3
    never in round 3), not from what the run reported."""
    from opacus.accountants import RDPAccountant

    result = _plain_run(at)
    uploads = {silo: 4 for silo in range(4)}
    uploads[1] -= at != "after_upload"
    uploads[3] -= 1
    for info in result.placement:
        accountant = RDPAccountant()
        accountant.history = [(DP_SGD["noise_multiplier"], 32 / info.num_records, LOCAL_STEPS * uploads[info.silo_id])]
        expected = accountant.get_epsilon(delta=DP_SGD["delta"])
        assert result.privacy["epsilon_per_silo"][str(info.silo_id)] == pytest.approx(expected, rel=1e-9)


def test_after_upload_the_update_is_used_and_before_upload_it_is_not(ray_local, tmp_path):
    """Three runs of the same seed: no crash, silo 1 crashing after its upload in round 1 (its update still counts,
    so round 1's model is the crash-free one), and before it (round 1's model differs)."""
    def first_round_loss(crashes):
        result = run(_scenario(DP_SGD, crashes, rounds=1))
        return result.rounds[0].report.loss, result.model_state

    clean_loss, clean_model = first_round_loss([])
    after_loss, after_model = first_round_loss([{"silo": 1, "round": 1, "at": "after_upload"}])
    before_loss, _ = first_round_loss([{"silo": 1, "round": 1, "at": "before_upload"}])
    assert after_loss == clean_loss and all(torch.equal(clean_model[k], after_model[k]) for k in clean_model)
    assert before_loss != clean_loss


def test_rpdp_budgets_hold_across_crashes(ray_local, tmp_path):
    """Each silo's own record of spending (its snapshot) equals the server's account of its uploads, and no record
    exceeds its budget, with a silo crashing before its upload in one round and after it in another."""
    crashes = [{"silo": 2, "round": 2, "at": "before_upload"}, {"silo": 2, "round": 4, "at": "after_upload"},
               {"silo": 0, "round": 3, "at": "setup"}]
    result = run(_scenario(RPDP, crashes, rounds=5), checkpoint_dir=tmp_path / "ck")
    assert result.privacy["max_spent_over_budget"] <= 1.0
    per_record = read_checkpoint(tmp_path / "ck")["accountant"].per_record()
    for silo_id, silo in _silo_states(tmp_path / "ck").items():
        charged = per_record["rounds"][per_record["silo"] == silo_id]
        np.testing.assert_array_equal(silo.mechanism.accountant.rounds, charged)
        assert np.all(silo.mechanism.accountant.spent() <= silo.mechanism.budgets + 1e-12)
    assert result.failures["crashes"] == 3


def test_several_silos_per_worker_crash_together(ray_local, tmp_path):
    crashes = [{"silo": 2, "round": 2, "at": "before_upload"}]
    result = run(_scenario(DP_SGD, crashes, resources={**ONE_SILO_PER_WORKER, "silos_per_actor": 2}))
    worker_silos = next(hosted for hosted in result.packing if 2 in hosted)
    assert result.rounds[1].report.dropped == tuple(sorted(worker_silos)) and len(worker_silos) == 2
    assert all(set(worker_silos) <= set(r.report.events) for r in result.rounds[2:])


def _kill_once_idle(pick, *, after_rounds: int):
    """An ``on_round`` that, once ``after_rounds`` rounds ended, kills the process of the actor ``pick(federation)``
    (as a lost node does, between rounds) and returns once Ray has restarted it, empty, or marked it dead."""
    ended = []

    def kill(federation) -> None:
        ended.append(True)
        if len(ended) != after_rounds:
            return
        actor = pick(federation)

        def pid() -> int | None:
            try:
                return ray.get(actor.__ray_call__.remote(lambda _: os.getpid()))
            except ray.exceptions.ActorUnavailableError:  # restarting
                return None
            except ray.exceptions.ActorDiedError:  # not restarted
                return 0

        first = pid()
        ray.kill(actor, no_restart=False)
        while pid() in (first, None):
            time.sleep(0.05)
    return kill


def _worker_of(silo: int):
    return lambda federation: federation.workers[next(i for i, hosted in enumerate(federation.packing) if silo in hosted)]


@pytest.mark.parametrize("protocol", [{"secure_aggregation": False}, {"secure_aggregation": True}])
def test_a_worker_that_died_between_rounds_drops_its_silos_from_the_next_round_and_comes_back(ray_local, tmp_path, protocol):
    """The CI failure of session 14 (a ``KeyError`` from the restarted worker): a worker process that dies while
    idle comes back empty; the next round finds that out, drops its silos as a crash (nothing released, nothing
    charged) and restores them from their snapshots: the run equals one whose silo 1 crashes at the start of round 3."""
    result = run(_scenario(DP_SGD, [], protocol=protocol), checkpoint_dir=tmp_path / "killed",
                 on_round=_kill_once_idle(_worker_of(1), after_rounds=2))
    reports = [record.report for record in result.rounds]
    assert [r.dropped for r in reports] == [(), (), (1,), ()]
    assert reports[2].crashed_workers and 1 not in reports[2].events and 1 in reports[3].events
    assert not any(r.abandoned for r in reports) and result.failures["crashes"] == 1
    crashed = run(_scenario(DP_SGD, [{"silo": 1, "round": 3, "at": "setup"}], protocol=protocol))
    assert [r.report.dropped for r in crashed.rounds] == [r.dropped for r in reports]
    assert all(torch.equal(result.model_state[k], crashed.model_state[k]) for k in crashed.model_state)
    assert result.privacy["epsilon_per_silo"] == crashed.privacy["epsilon_per_silo"]


def test_a_server_that_died_ends_the_run_as_a_runtime_fault(ray_local, tmp_path):
    """The server actor is never restarted (its state lives only in it and in the checkpoint): lost between rounds,
    the run ends with a RuntimeFault (exit 3 and the resume command at the command line), not with an error from a
    server that came back empty: at the checkpoint that follows, or without checkpoints at the next round."""
    from privsilo.simulator.errors import RuntimeFault

    kill_server = _kill_once_idle(lambda federation: federation.server, after_rounds=2)
    with pytest.raises(RuntimeFault, match="the server actor or the snapshot vault was lost as the checkpoint was taken"):
        run(_scenario(DP_SGD, []), checkpoint_dir=tmp_path, on_round=kill_server)
    kill_server = _kill_once_idle(lambda federation: federation.server, after_rounds=2)
    with pytest.raises(RuntimeFault, match="round 3: the server actor was lost"):
        run(_scenario(DP_SGD, []), on_round=kill_server)


@pytest.mark.parametrize("server, secure_aggregation", [(ServerLosingAWorkerInSetUp, False),  # its snapshot call fails
                                                        (ServerLosingAWorkerThatComesBackInSetUp, True)])  # it answers empty
def test_a_worker_lost_during_the_set_up_ends_the_run_as_a_runtime_fault(ray_local, server, secure_aggregation):
    """Before the silos' first snapshots nothing can bring a lost worker's silos back: a worker whose process dies
    as the protocol's set-up starts (its calls fail while it restarts, or it answers empty once restarted) ends the
    start as a RuntimeFault (exit 3 at the command line), not with a KeyError from the missing snapshots."""
    from privsilo.simulator.engine.federation import Federation
    from privsilo.simulator.errors import RuntimeFault

    scenario = _scenario(DP_SGD, [{"silo": 1, "round": 3, "at": "setup"}], protocol={"secure_aggregation": secure_aggregation})
    with pytest.raises(RuntimeFault, match="lost during its set-up, before every silo's first snapshot was kept"):
        with Federation(scenario, server_actor=server):
            pass


def _uldp(heart_disease_dir, mechanism: dict, crashes: list[dict], *, rounds: int, users: int = 50, **blocks) -> dict:
    """ULDP on Fed-Heart-Disease's four hospitals with the given crashes."""
    return {
        "name": "uldp_faults", "seed": 3,
        "data": {"dataset": "heart_disease", "partition": "natural", "silos": 4, "path": str(heart_disease_dir),
                 "users": {"count": users, "records": "zipf", "silos": "zipf"}},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": rounds, "local_steps": 2, "batch_size": 16, "lr": 0.01},
        "mechanism": {"name": "uldp", "noise_multiplier": 5.0, "max_grad_norm": 0.5, "delta": 1e-5, **mechanism},
        "resources": ONE_SILO_PER_WORKER,
        "faults": {"crashes": crashes},
        **blocks,
    }


def test_uldp_survives_crashes(ray_local, heart_disease_dir, tmp_path):
    crashes = [{"silo": 3, "round": 2, "at": "before_upload"}, {"silo": 1, "round": 3, "at": "after_upload"}]
    result = run(_uldp(heart_disease_dir, {"variant": "naive"}, crashes, rounds=4), out_dir=tmp_path / "run")
    assert [r.report.dropped for r in result.rounds] == [(), (3,), (1,), ()]
    assert result.privacy["epsilon"] > 0
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert [row["dropped"] for row in rows] == ["", "3", "1", ""]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failures"]["crashes"] == 2 and "not charged" in summary["privacy"]["under_failure"]


def test_random_failures_run_to_the_end(ray_local):
    scenario = _scenario(DP_SGD, [], rounds=5)
    scenario["faults"] = {"silo_failure_rate": 0.2}
    result = run(scenario)
    expected = crash_plan(validate_scenario(scenario).faults, seed=scenario["seed"], num_silos=4, rounds=5).crashes
    crashed_rounds = sorted({round_index for _, round_index in expected})
    assert [i for i, r in enumerate(result.rounds) if r.report.dropped] == crashed_rounds
    # every silo takes part in every round and has a worker of its own: each planned crash is one process death
    assert [r.report.dropped for r in result.rounds] == [tuple(sorted(s for s, i in expected if i == k)) for k in range(5)]
    assert result.failures["crashes"] == result.failures["restarts"] == len(expected) > 0





@pytest.mark.parametrize(("at", "neighbours", "server"), [
    ("setup", "all", "honest_but_curious"), ("before_upload", 2, "honest_but_curious"),
    ("after_upload", "all", "honest_but_curious"), ("after_upload", 2, "honest_but_curious"),
    ("before_upload", 2, "may_lie"), ("after_upload", "all", "may_lie"),
])
def test_secure_aggregation_recovers_the_plaintext_sum_of_the_survivors(ray_local, at, neighbours, server):
    """The same crashes under secure aggregation (complete graph, or SecAgg+ with 2 neighbours; silos that assume
    an honest-but-curious server, or one that may lie: identity keys at set-up, the consistency round) and under
    the plain sum: the same silos drop, and every round's model agrees to the fixed-point precision (2^-24 per
    silo); under may_lie a silo lost after its upload never signs the claim, so its update is left out, as if it
    had crashed before the upload (it is charged all the same)."""
    plain = _plain_run(at)
    secure = run(_scenario(DP_SGD, _crashes(at), protocol={"secure_aggregation": True, "neighbours": neighbours,
                                                          "server": server}))
    assert [r.report.dropped for r in secure.rounds] == [r.report.dropped for r in plain.rounds] == [(), (1,), (3,), ()]
    assert [sorted(r.report.events) for r in secure.rounds] == [sorted(r.report.events) for r in plain.rounds]
    if (server, at) == ("may_lie", "after_upload"):
        # an uploader that never signs the claim is left out of the sum, as if it had crashed before its upload
        # (later rounds differ from that run: the silo's own state moved on with its training)
        unsent = _plain_run("before_upload")
        assert [r.report.loss for r in secure.rounds[:2]] == pytest.approx([r.report.loss for r in unsent.rounds[:2]], abs=1e-5)
        assert not any(r.report.abandoned for r in secure.rounds)
        return
    assert [r.report.loss for r in secure.rounds] == pytest.approx([r.report.loss for r in plain.rounds], abs=1e-5)
    for name, value in plain.model_state.items():
        np.testing.assert_allclose(secure.model_state[name].numpy(), value.numpy(), atol=1e-6)


def test_dropouts_beyond_the_threshold_abandon_the_round_and_the_run_goes_on(ray_local, tmp_path):
    """Four silos, threshold 3: two dropping before their upload leave two survivors, too few to unmask; the
    round is abandoned (model unchanged, skipped in metrics.csv), the survivors are still charged, the run goes on."""
    crashes = [{"silo": 0, "round": 2, "at": "before_upload"}, {"silo": 2, "round": 2, "at": "setup"}]
    with pytest.warns(RuntimeWarning, match=r"1 round\(s\) lost more silos than protocol.dropout_rate = 0.05 assumes"):
        result = run(_scenario(DP_SGD, crashes, protocol={"secure_aggregation": True, "threshold": 3}), out_dir=tmp_path / "run")
    second = result.rounds[1].report
    assert second.abandoned and second.skipped and second.dropped == (0, 2)
    assert second.loss == result.rounds[0].report.loss  # the model did not move
    assert sorted(second.events) == [1, 3]  # what left a silo is charged even though the round was abandoned
    assert not result.rounds[2].report.skipped and result.rounds[3].report.loss != second.loss
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert [row["skipped"] for row in rows] == ["false", "true", "false", "false"]
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["failures"]["rounds_abandoned"] == 1
    assert written["secure_aggregation"]["dropouts_beyond_assumption"] == [
        {"round": second.round_index, "participants": 4, "dropped": 2, "assumed_at_most": 1}]
    assert written["secure_aggregation"]["by_round_size"] == [
        {"round_size": 4, "rounds": 4, "neighbours": "all", "threshold": 3, "security_failure_probability": 0.0,
         "correctness_failure_probability": 1.0}]  # t = 3 of 4 cannot survive one dropout after an upload


def test_uldp_with_secure_aggregation_survives_crashes(ray_local, heart_disease_dir):
    crashes = [{"silo": 3, "round": 1, "at": "before_upload"}, {"silo": 1, "round": 2, "at": "after_upload"}]
    result = run(_uldp(heart_disease_dir, {"variant": "avg"}, crashes, rounds=3,
                       protocol={"secure_aggregation": True, "threshold": 2}))
    assert [r.report.dropped for r in result.rounds] == [(3,), (1,), ()]
    assert not any(r.report.abandoned for r in result.rounds)
    assert sorted(result.rounds[2].report.events) == [0, 1, 2, 3]
    assert summary(result)["secure_aggregation"]["by_round_size"][0]["threshold"] == 2  # the scenario's secure aggregation ran


def test_private_weighting_abandons_a_round_a_silo_left_and_resumes_with_it(ray_local, heart_disease_dir):
    """ULDP's Private Weighting Protocol has no dropout recovery (every silo's ciphertexts carry masks the others
    cancel): a silo lost before its upload abandons the round; one lost after it does not; its Paillier state
    comes back from its snapshot and the next round sums normally."""
    crashes = [{"silo": 2, "round": 1, "at": "before_upload"}, {"silo": 0, "round": 2, "at": "after_upload"}]
    mechanism = {"variant": "avg_w", "noise_multiplier": 1.0, "global_lr": 2.0, "weighting": "private",
                 "paillier_key_bits": 2048, "max_records_per_user": 1000}
    scenario = _uldp(heart_disease_dir, mechanism, crashes, rounds=2, users=12, protocol={"secure_aggregation": True})
    result = run(scenario)
    reports = [r.report for r in result.rounds]
    assert [r.dropped for r in reports] == [(2,), (0,)]
    assert [r.abandoned for r in reports] == [True, False]
    assert sorted(reports[1].events) == [0, 1, 2, 3]  # silo 2 is back, silo 0 uploaded before it crashed
    assert reports[0].loss != reports[1].loss
    assert "secure_aggregation" not in summary(result)  # the mechanism's own protocol ran in its place
