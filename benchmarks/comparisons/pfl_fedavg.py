"""The pfl-research half of ``bench_vs_pfl.py``: FedAvg with Apple's pfl simulator on an exported workload.

Runs in the environment made by ``benchmarks/comparisons/pfl_env.sh`` (it imports pfl, torch and numpy, never privsilo). The
workload file (an ``.npz`` written by ``bench_vs_flower.export_workload``) holds the silos' records, the test split,
the initial model as one flat vector and the training settings. pfl is set up as its own FedAvg benchmarks set it
up: ``SimulatedBackend`` in one process, ``FederatedAveraging`` with a central SGD optimiser of learning rate 1
(the new model is the weighted mean of the silos' models), local SGD at the workload's learning rate, every silo
in every round (``train_cohort_size`` = silos), no validation cohort.

pfl trains a user's dataset in order, ``local_batch_size`` records a step; so that it trains on the batches privsilo
draws, each silo's dataset for a round is its next ``local_steps`` batches, drawn without replacement from its
records with the silo's own seeded generator kept across rounds (as ``flower_fedavg.py`` draws them). The
silos' models are weighted by their record counts (a pfl weighting postprocessor), as privsilo's FedAvg weights
them. After every round a callback evaluates the global model on the test split. Writes the test accuracies, the
final one and the rounds' wall time as JSON to ``--result``.

    python -m benchmarks.comparisons.pfl_fedavg --workload W.npz --result R.json
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightingStrategy
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.data.sampling import get_user_sampler
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics
from pfl.model.pytorch import PyTorchModel


class Mlp(torch.nn.Sequential):
    """One hidden ReLU layer (privsilo's ``mlp_128``), with the ``loss`` and ``metrics`` pfl calls on a model."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__(torch.nn.Flatten(), torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                         torch.nn.Linear(hidden, classes))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        return {}


class WeightByRecords(WeightingStrategy):
    """Each silo's model update weighted by the silo's record count (privsilo's and Flower's FedAvg weights)."""

    def __init__(self, records: dict[str, int]) -> None:
        self.records = records

    def postprocess_one_user(self, *, stats, user_context):
        stats.reweight(self.records[user_context.user_id])
        return stats, Metrics()


class TestAccuracy(TrainingProcessCallback):
    """The global model's accuracy on the test split after every round."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y, self.accuracies = x, y, []

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        module = model.pytorch_model
        module.eval()
        with torch.no_grad():
            self.accuracies.append((module(self.x).argmax(dim=1) == self.y).double().mean().item())
        module.train()
        return False, Metrics()


class SiloBatches(Dataset):
    """A silo's dataset for one round: its ``local_steps`` batches as drawn, one SGD step each. pfl would cut the
    concatenated draws into batches of ``local_batch_size``, which differs where a silo holds fewer records than a
    batch (100 silos of digits hold 14-15 each)."""

    def __init__(self, batches: list[list[torch.Tensor]], user_id: str) -> None:
        super().__init__(raw_data=[torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])],
                         user_id=user_id)
        self.batches = batches

    def iter(self, batch_size):  # noqa: A003 (pfl's name)
        yield from self.batches


def silo_batches(work: dict[str, np.ndarray]):
    """``make_dataset_fn`` for pfl: a silo's next ``local_steps`` batches, from its generator kept across rounds."""
    silos = int(work["silos"])
    generators = [torch.Generator().manual_seed(int(seed)) for seed in work["seeds"][:silos]]
    steps, batch = int(work["local_steps"]), int(work["batch_size"])

    def make_dataset(user_id: str) -> Dataset:
        silo = int(user_id)
        records = work["order"][work["offsets"][silo]:work["offsets"][silo + 1]]
        draws = [records[torch.randperm(len(records), generator=generators[silo])[:batch].numpy()] for _ in range(steps)]
        return SiloBatches([[torch.tensor(work["x_train"][chosen]), torch.tensor(work["y_train"][chosen])]
                            for chosen in draws], user_id)

    return make_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    with np.load(args.workload) as data:
        work = {key: data[key] for key in data.files}
    silos, rounds = int(work["silos"]), int(work["rounds"])
    users = [str(silo) for silo in range(silos)]
    records = {user: int(work["offsets"][int(user) + 1] - work["offsets"][int(user)]) for user in users}
    training = FederatedDataset(silo_batches(work), get_user_sampler("minimize_reuse", users))

    module = Mlp(*(int(v) for v in work["layers"]))
    torch.nn.utils.vector_to_parameters(torch.tensor(work["initial"], dtype=torch.float32), module.parameters())
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0))
    accuracy = TestAccuracy(torch.tensor(work["x_test"]), torch.tensor(work["y_test"]))
    backend = SimulatedBackend(training_data=training, val_data=training, postprocessors=[WeightByRecords(records)])
    started = time.perf_counter()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=rounds, evaluation_frequency=rounds + 1,
                                           train_cohort_size=silos, val_cohort_size=None),
        backend=backend, model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=float(work["lr"]), local_num_epochs=1,
                                              local_batch_size=int(work["batch_size"])),
        model_eval_params=NNEvalHyperParams(local_batch_size=None), callbacks=[accuracy])
    result = {"accuracies": accuracy.accuracies, "accuracy": accuracy.accuracies[-1],
              "rounds_seconds": time.perf_counter() - started, "complete_rounds": len(accuracy.accuracies)}
    with open(args.result, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
