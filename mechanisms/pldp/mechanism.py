"""``pldp``: personalized local DP with PDPM, FedAvg of the perturbed uploads (PLDP-FL, Shen et al., Entropy 2023,
Algorithm 1).

Each sampled client trains ``local_steps`` of mini-batch SGD from the global model, then perturbs what it uploads
with PDPM (:mod:`privsilo.mechanisms.pldp.sampler`) in its own safe range [c_i - L_i/2, c_i + L_i/2] at its own budget
eps_i, clipping values outside the range first: the model weights (``perturb: weights``, the paper) or the
update, the weights minus the global model (``perturb: update``, whose natural range is far smaller). Every
coordinate is perturbed (``coordinates: all``) or k sampled ones (``coordinates: k``, see
:mod:`privsilo.mechanisms.pldp.upload`). The server averages the perturbed uploads of the round's clients with equal
weights (Eq. 7); PDPM is unbiased, so the average estimates the clients' mean. The silo sends its upload minus
the global model (the same average, as a delta), so any protocol, including secure aggregation, can carry it.

Neighbouring relation: any two inputs of one client in its safe range, i.e. any two local datasets (client-level
local DP, against the server and anyone who sees an upload). Accounting: :mod:`privsilo.mechanisms.pldp.accountant`.
The local training loss is not released.

In an audit (client level) a silo also carries the audit's canary clients (Andrew et al. 2024, Sec. 3). Canary
client c is a PLDP-FL client with its host's settings (range, centre, eps_i, coordinates) that runs Algorithm 1's
client step (perturb with PDPM, upload) without training. Its input is the vertex c_i + (L_i/2) sign(u_c) of
the host's safe range (``ClientPerturbation.extreme_input``: the input with the largest component along u_c,
every coordinate at an end of the range), as its update (``perturb: update``) or its weights (``perturb:
weights``, uploaded minus the global model as the silo's own upload is). It is perturbed with PDPM afresh in
every round, from the round's generator after the silo's own upload (so the silo's own draws do not depend on
the canaries), and counts as one more client of weight ``CLIENT_WEIGHT`` in the mean. Canary clients report no
privacy events: the accountant accounts the real clients only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from privsilo.mechanisms.base import (
    GlobalState,
    Mechanism,
    PrivacyAccountant,
    ServerMechanism,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    model_to_vector,
    numpy_generator,
)
from privsilo.mechanisms.canaries import with_canary_clients
from privsilo.mechanisms.events import LocalDpPlan, LocalDpUpload
from privsilo.mechanisms.fedavg import FedAvgServer, local_sgd, weighted_delta_vector
from privsilo.mechanisms.pldp.params import PldpParams

CLIENT_WEIGHT = 1.0  # Eq. 7: the plain mean of the uploads (a record count would be un-noised data)
SEED_WORDS = 4  # each round's numpy generator is seeded with 4 x 62 bits drawn from the silo's generator


class PldpSilo(SiloMechanism):
    """Local SGD, then PDPM on the weights or the update; announces its plan, reports one event per upload."""

    def __init__(self, context: SiloContext, params: PldpParams) -> None:
        self.context = context
        self.perturb_update = params.perturb == "update"
        self.perturbation = params.client(context.silo_id)
        dimension = sum(p.numel() for p in context.model.parameters())
        self.plan = LocalDpPlan(
            epsilon_per_coordinate=self.perturbation.epsilon_per_coordinate,
            coordinates=self.perturbation.perturbed_per_upload(dimension),
        )
        canaries = context.canaries
        directions = () if canaries is None else canaries.directions(dimension)
        self.canary_inputs = [self.perturbation.extreme_input(direction) for direction in directions]

    def setup_events(self) -> tuple[LocalDpPlan, ...]:
        return (self.plan,)

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        (start,) = state
        update, _ = local_sgd(self.context, start)  # the loss is data-dependent and not perturbed: not released
        rng = numpy_generator(self.context.generator, words=SEED_WORDS)
        if self.perturb_update:
            upload = self.perturbation.perturb(update, rng=rng)
        else:
            upload = self.perturbation.perturb(model_to_vector(self.context.model), rng=rng) - start
        event = LocalDpUpload(epsilon_per_coordinate=self.plan.epsilon_per_coordinate, coordinates=self.plan.coordinates)
        vector = weighted_delta_vector(upload, CLIENT_WEIGHT)
        if self.canary_inputs:
            vector = with_canary_clients(vector, self.canary_uploads(start, rng=rng), weight=CLIENT_WEIGHT)
        return SiloContribution(vector=vector, events=(event,))

    def canary_uploads(self, start: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """One upload per hosted canary client (rows): PDPM of its input with fresh draws from ``rng``, as a
        delta from the global model ``start`` like the silo's own upload."""
        released = np.array([self.perturbation.perturb(values, rng=rng) for values in self.canary_inputs])
        return released if self.perturb_update else released - start


class Pldp(Mechanism):
    """PLDP-FL (see the module docstring)."""

    name = "pldp"
    privacy_unit = "client"
    Params = PldpParams
    # Not attackable: the upload has the weighted-delta form, but each coordinate is clamped to its safe range and
    # PDPM then replaces it by one of three values about the range's length L apart whatever the budget.
    audit_units = ("client",)

    @classmethod
    def audit_claims(cls, privacy: Mapping[str, Any], hosts: Sequence[str]) -> dict[str, Any]:
        """A canary client takes its host's eps_i, range and coordinates, so its claims are its host's: the largest
        over ``hosts`` of ``claimed_epsilon_per_client`` (pure LDP, basic composition over the coordinates and the
        participations: a guarantee) and ``claimed_epsilon_per_coordinate`` (the paper's figure: not a guarantee for
        a client), Shen et al. 2023 (see ``privsilo.mechanisms.pldp.accountant``)."""
        return {
            "claimed_epsilon_per_client": _largest(privacy["epsilon_per_client"], hosts),
            "claimed_epsilon_per_coordinate": _largest(privacy["epsilon_per_coordinate"], hosts),
        }

    @classmethod
    def gdp_mu_star(cls, events: Mapping[int, Sequence[Any]], *, rounds: int, claims: Mapping[str, Any],
                    budget: float | None = None) -> float | None:
        """Pure epsilon-DP per client, at the hosts' largest ``claimed_epsilon_per_client``: randomized response's mu."""
        from privsilo.mechanisms.gdp import pure_dp_mu

        epsilon = claims.get("claimed_epsilon_per_client")
        return None if epsilon is None else pure_dp_mu(epsilon)

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        return "pure epsilon-DP per client (the hosts' largest): randomized response's mu, exact"

    @classmethod
    def privacy_line(cls, privacy: Mapping[str, Any]) -> str:
        """Both figures, by name: what a client's data gets, and the paper's per-scalar one."""
        per_client = max(privacy["epsilon_per_client"].values(), default=0.0)
        per_coordinate = max((v for v in privacy["epsilon_per_coordinate"].values() if v is not None), default=0.0)
        return (
            f"epsilon_per_client = {per_client:.4g} (largest; pure LDP composed over the coordinates and participations), "
            f"epsilon_per_coordinate = {per_coordinate:.4g} (largest; one scalar of one upload, the paper's figure)"
        )

    def silo(self, context: SiloContext) -> SiloMechanism:
        return PldpSilo(context, self.params)

    def server(self) -> ServerMechanism:
        return FedAvgServer()

    def accountant(self) -> PrivacyAccountant:
        from privsilo.mechanisms.pldp.accountant import LocalDpAccountant

        return LocalDpAccountant()

    def write_plots(self, privacy: Mapping[str, Any], directory: Path) -> None:
        from privsilo.mechanisms.pldp.plots import plot_epsilon_per_client  # matplotlib: only where a run writes its files

        plot_epsilon_per_client(privacy, path=directory / "epsilon_per_client.png")


def _largest(per_client: Mapping[str, float | None], keys: Sequence[str]) -> float | None:
    """The largest figure of the clients ``keys`` (a lower bound on a pool is at most its largest member's epsilon)."""
    return max((per_client[key] for key in keys if per_client.get(key) is not None), default=None)
