"""The experimenter's evaluation of a personalised run (IFCA, Ghosh et al. 2020; Galli et al., ICISSP 2023).

After every round the driver, which holds every client's records for the experiment anyway, evaluates the
global state as the clients would use it: client c picks the hypothesis with the lowest mean loss on its own
records (Algorithm 1's choice), and is scored by that hypothesis' loss and accuracy on the test data of its
distribution (its true group's test set where the data has groups, e.g. its rotation; the whole test set
otherwise). None of this reaches the server or the privacy accounting.

Cluster recovery, where the data has true groups: each hypothesis stands for the group most of the clients
that pick it belong to, and the recovery is the share of clients whose hypothesis stands for their own group
(the purity of the clustering; 1 when every hypothesis serves one group only).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from privsilo.mechanisms.base import load_vector_into_model, prediction_loss
from privsilo.simulator.data import Dataset
from privsilo.simulator.engine.messages import RoundReport
from privsilo.simulator.models.builtin import build_scenario_model

if TYPE_CHECKING:
    from privsilo.simulator.scenario import ModelConfig, Scenario

BATCH = 4096


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a global state of k hypotheses on N clients and G test groups."""

    choices: np.ndarray  # (N,) the hypothesis each client picks
    client_loss: np.ndarray  # (N,) test loss of the picked hypothesis on the client's group
    client_accuracy: np.ndarray  # (N,) likewise accuracy (NaN for regression)
    hypothesis_loss: np.ndarray  # (k, G) test loss of every hypothesis on every group
    hypothesis_accuracy: np.ndarray  # (k, G)


def personalised_evaluator(scenario: Scenario, dataset: Dataset, parts: Sequence[np.ndarray]) -> PersonalisedEvaluator | None:
    """The evaluator of a run whose mechanism is personalised, else None."""
    if not scenario.mechanism.plugin.personalised:
        return None
    return PersonalisedEvaluator(dataset=dataset, parts=parts, model=scenario.model)


class PersonalisedEvaluator:
    """Evaluates each round's global state per client and per hypothesis, and keeps the history."""

    def __init__(self, *, dataset: Dataset, parts: Sequence[np.ndarray], model: ModelConfig) -> None:
        self.model = build_scenario_model(model, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
        self.model.eval()
        self.clients = [(torch.from_numpy(dataset.x_train[idx]), torch.from_numpy(dataset.y_train[idx])) for idx in parts]
        self.regression = dataset.kind == "regression"
        self.client_groups = client_groups(dataset, parts)
        test_groups = np.zeros(len(dataset.y_test), dtype=np.int64) if dataset.test_groups is None else dataset.test_groups
        self.group_names = tuple(dataset.group_names) if dataset.test_groups is not None else ("all",)
        self.test_sets = [
            (torch.from_numpy(dataset.x_test[test_groups == g]), torch.from_numpy(dataset.y_test[test_groups == g]))
            for g in range(len(self.group_names))
        ]
        self.history: list[tuple[int, Evaluation]] = []
        self.final_state: tuple[np.ndarray, ...] = ()

    def evaluate(self, state: Sequence[np.ndarray]) -> Evaluation:
        hypothesis_loss = np.empty((len(state), len(self.test_sets)))
        hypothesis_accuracy = np.empty_like(hypothesis_loss)
        train_loss = np.empty((len(self.clients), len(state)))
        for j, vector in enumerate(state):
            load_vector_into_model(self.model, vector)
            for g, (features, labels) in enumerate(self.test_sets):
                hypothesis_loss[j, g], hypothesis_accuracy[j, g] = self._loss_and_accuracy(features, labels)
            for c, (features, labels) in enumerate(self.clients):
                train_loss[c, j], _ = self._loss_and_accuracy(features, labels)
        choices = np.argmin(train_loss, axis=1)
        groups = np.zeros(len(self.clients), dtype=np.int64) if self.client_groups is None else self.client_groups
        return Evaluation(
            choices=choices,
            client_loss=hypothesis_loss[choices, groups],
            client_accuracy=hypothesis_accuracy[choices, groups],
            hypothesis_loss=hypothesis_loss,
            hypothesis_accuracy=hypothesis_accuracy,
        )

    @torch.no_grad()
    def _loss_and_accuracy(self, features: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
        outputs = torch.cat([self.model(chunk) for chunk in torch.split(features, BATCH)])
        loss = prediction_loss(outputs, labels).item()
        if self.regression:
            return loss, math.nan
        return loss, (outputs.argmax(dim=1) == labels).double().mean().item()

    def after_round(self, report: RoundReport, state: Sequence[np.ndarray]) -> RoundReport:
        """Record the round's evaluation; the report's loss and accuracy become the clients' means."""
        evaluation = self.evaluate(state)
        self.history.append((report.round_index, evaluation))
        self.final_state = tuple(state)
        return dataclasses.replace(
            report, loss=float(evaluation.client_loss.mean()), accuracy=float(evaluation.client_accuracy.mean())
        )

    def summary(self) -> dict[str, Any]:
        """The last round's evaluation (``summary.json`` ``personalisation``), plus ``history`` (every round's
        hypothesis figures) and ``state_dicts`` (the final hypotheses), which go to their own files."""
        _, last = self.history[-1]
        names = self.group_names
        groups = self.client_groups
        summary: dict[str, Any] = {
            "hypotheses": int(last.hypothesis_loss.shape[0]),
            "groups": None if groups is None else list(names),
            "loss": float(last.client_loss.mean()),
            "accuracy": float(last.client_accuracy.mean()),
            "cluster_recovery": None if groups is None else cluster_recovery(last.choices, groups),
            "clients_per_hypothesis": np.bincount(last.choices, minlength=last.hypothesis_loss.shape[0]).tolist(),
            "per_client": [
                {"client": c, "group": None if groups is None else names[groups[c]], "hypothesis": int(last.choices[c]),
                 "loss": float(last.client_loss[c]), "accuracy": float(last.client_accuracy[c])}
                for c in range(len(last.choices))
            ],
            "hypotheses_test": [
                {"hypothesis": j, "group": names[g], "loss": float(last.hypothesis_loss[j, g]),
                 "accuracy": float(last.hypothesis_accuracy[j, g])}
                for j in range(last.hypothesis_loss.shape[0]) for g in range(len(names))
            ],
        }
        if groups is not None:
            summary["contingency"] = contingency(
                last.choices, groups, num_hypotheses=last.hypothesis_loss.shape[0], num_groups=len(names)
            ).tolist()
        summary["history"] = [
            {"round": round_index + 1, "hypothesis": j, "group": names[g], "loss": float(ev.hypothesis_loss[j, g]),
             "accuracy": float(ev.hypothesis_accuracy[j, g]), "clients_picking": int((ev.choices == j).sum())}
            for round_index, ev in self.history for j in range(ev.hypothesis_loss.shape[0]) for g in range(len(names))
        ]
        summary["state_dicts"] = [self._state_dict(vector) for vector in self.final_state]
        return summary

    def _state_dict(self, vector: np.ndarray) -> dict[str, torch.Tensor]:
        load_vector_into_model(self.model, vector)
        return {key: value.detach().clone() for key, value in self.model.state_dict().items()}


def client_groups(dataset: Dataset, parts: Sequence[np.ndarray]) -> np.ndarray | None:
    """Each client's true group (the most common group of its records), or None for data without groups."""
    if dataset.train_groups is None:
        return None
    return np.array([int(np.bincount(dataset.train_groups[idx]).argmax()) for idx in parts], dtype=np.int64)


def contingency(choices: np.ndarray, groups: np.ndarray, *, num_hypotheses: int, num_groups: int) -> np.ndarray:
    """(k, G) counts: how many clients of each true group pick each hypothesis."""
    table = np.zeros((num_hypotheses, num_groups), dtype=np.int64)
    np.add.at(table, (np.asarray(choices), np.asarray(groups)), 1)
    return table


def cluster_recovery(choices: np.ndarray, groups: np.ndarray) -> float:
    """Share of clients whose hypothesis stands for their own true group (the group most of the hypothesis'
    clients belong to; ties: the lowest group index): the purity of the clustering."""
    choices, groups = np.asarray(choices), np.asarray(groups)
    table = contingency(choices, groups, num_hypotheses=int(choices.max()) + 1, num_groups=int(groups.max()) + 1)
    return float(table.max(axis=1).sum() / len(choices))
