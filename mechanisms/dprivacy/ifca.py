"""The server side of Galli et al.'s Algorithm 1 (IFCA, Ghosh et al. 2020, with k-means at the server).

The clients upload perturbed parameter vectors without saying which hypothesis they trained; the server runs
k-means on the uploads, initialised at the current hypotheses, and each hypothesis becomes the mean of its
cluster. A hypothesis whose cluster is empty keeps its value.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from privsilo.mechanisms.base import GlobalState, ServerMechanism

MAX_KMEANS_ITERATIONS = 100


def kmeans(points: np.ndarray, *, initial_centres: np.ndarray, max_iterations: int = MAX_KMEANS_ITERATIONS) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means from ``initial_centres`` (k, n) on ``points`` (m, n); returns (labels, centres).

    Each point joins its nearest centre in Euclidean distance (ties: the lowest index); each centre becomes the
    mean of its points, and a centre without points stays at its initial value. Stops when no label changes
    (or after ``max_iterations``); the centres returned are those of the final labels.
    """
    points = np.asarray(points, dtype=np.float64)
    initial = np.asarray(initial_centres, dtype=np.float64)
    if points.ndim != 2 or initial.ndim != 2 or points.shape[1] != initial.shape[1] or len(initial) < 1:
        raise ValueError(f"points {points.shape} and initial centres {initial.shape} must be (m, n) and (k >= 1, n)")
    centres, labels = initial.copy(), None
    for _ in range(max_iterations):
        new_labels = nearest_centre(points, centres)
        if labels is not None and np.array_equal(new_labels, labels):
            break
        labels = new_labels
        centres = cluster_means(points, labels, fallback=initial)
    if labels is None:  # max_iterations == 0
        labels = nearest_centre(points, centres)
    return labels, centres


def nearest_centre(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Index of the nearest centre of each point (distances from the differences, not the expanded square)."""
    distances = np.stack([np.einsum("ij,ij->i", points - centre, points - centre) for centre in centres], axis=1)
    return np.argmin(distances, axis=1)


def cluster_means(points: np.ndarray, labels: np.ndarray, *, fallback: np.ndarray) -> np.ndarray:
    """Mean of each cluster's points; ``fallback[j]`` for a cluster without points."""
    centres = fallback.copy()
    for j in range(len(fallback)):
        members = points[labels == j]
        if len(members):
            centres[j] = members.mean(axis=0)
    return centres


class IfcaServer(ServerMechanism):
    """Hypotheses <- k-means cluster means of the round's uploads (Galli et al., Algorithm 1)."""

    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        raise TypeError("IFCA clusters the individual uploads; the server must call aggregate_individual")

    def aggregate_individual(self, state: GlobalState, contributions: Sequence[np.ndarray]) -> GlobalState:
        """Each contribution holds one client's upload, or (a silo with an audit's canary clients) several end to
        end, each clustered as one client."""
        if not contributions:
            return state
        uploads = np.concatenate([np.reshape(c, (-1, state[0].size)) for c in contributions])
        _, centres = kmeans(uploads, initial_centres=np.stack(state))
        return tuple(centres)
