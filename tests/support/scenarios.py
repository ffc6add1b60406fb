"""Small scenarios and silo contexts the tests build on."""
from __future__ import annotations


def small_scenario(**blocks) -> dict:
    """A fast digits scenario; keyword blocks replace the defaults."""
    scenario = {
        "name": "test",
        "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": 3},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": 3, "client_rate": 1.0, "local_steps": 5, "batch_size": 32, "lr": 0.1},
        "mechanism": {"name": "none"},
        "protocol": {"secure_aggregation": False},
        # the quickstart's and shipped scenarios' actor shape: runs one after another reuse the session's idle actors
        "resources": {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}},
    }
    scenario.update(blocks)
    return scenario


DP_SGD = {"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5}
LOCAL_STEPS = 3
# a crash takes down exactly the silo named (not its worker's other silos), whatever this machine's cores
ONE_SILO_PER_WORKER = {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}, "silos_per_actor": 1}


def faults_scenario(mechanism: dict, crashes: list[dict], *, rounds: int = 4, protocol: dict | None = None, **blocks) -> dict:
    """A digits scenario of four silos, one per worker, with the given ``faults.crashes``."""
    return small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 4},
        federation={"rounds": rounds, "client_rate": 1.0, "local_steps": LOCAL_STEPS, "batch_size": 32, "lr": 0.1},
        mechanism=mechanism,
        protocol=protocol or {"secure_aggregation": False},
        faults={"crashes": crashes},
        **{"resources": ONE_SILO_PER_WORKER, **blocks},
    )


def tiny_silo_context(silo_id: int = 1, canaries=None):
    """A silo context without Ray: 40 random 8x8 records, a logistic regression, a seeded generator; ``canaries``
    as an audit would give them (see privsilo.mechanisms.canaries)."""
    import numpy as np
    import torch

    from privsilo.mechanisms.base import LocalTraining, SiloContext
    from privsilo.simulator.models.builtin import build_model

    rng = np.random.default_rng(0)
    features = torch.tensor(rng.normal(size=(40, 1, 8, 8)), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 10, size=40))
    torch.manual_seed(0)
    model = build_model("logistic_regression", feature_shape=(1, 8, 8), num_classes=10)
    training = LocalTraining(local_steps=3, batch_size=8, lr=0.1, rounds=2, client_rate=1.0)
    return SiloContext(silo_id=silo_id, record_ids=np.arange(40), features=features, labels=labels, model=model,
                       training=training, generator=torch.Generator().manual_seed(9), device=torch.device("cpu"),
                       canaries=canaries)


def lenet_scenario(**changes):
    """A validated LeNet scenario on digits, one round of one local step on one record, attacked for 30 iterations;
    keyword blocks replace the defaults."""
    from privsilo.simulator.scenario import validate_scenario

    blocks = {"data": {"dataset": "digits", "partition": "iid", "silos": 3}, "model": {"name": "lenet"},
              "federation": {"rounds": 1, "client_rate": 1.0, "local_steps": 1, "batch_size": 1, "lr": 0.1},
              "attack": {"iterations": 30}}
    blocks.update(changes)
    return validate_scenario(small_scenario(**blocks))


def dprivacy_scenario(*, radius, nu=0.0, hypotheses=1, local_epochs=None, silos=3, **changes):
    """:func:`lenet_scenario` with d-privacy (clipped calibration); with ``local_epochs``, one record per silo."""
    mechanism = {"name": "dprivacy", "hypotheses": hypotheses, "nu": nu, "calibration": "clipped", "radius": radius}
    data = {"dataset": "digits", "partition": "iid", "silos": silos}
    if local_epochs is not None:
        mechanism["local_epochs"] = local_epochs
        data["max_records_per_silo"] = 1  # one batch: every epoch is one step on it, which the attacker replays
    return lenet_scenario(mechanism=mechanism, data=data, **changes)


def scenario_file_args(tmp_path, scenario: dict) -> list[str]:
    """``scenario`` written as YAML to ``tmp_path/scenario.yaml``: the command-line arguments that name it."""
    import yaml

    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return [str(path)]
