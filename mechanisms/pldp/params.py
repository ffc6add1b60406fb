"""YAML parameters of the ``pldp`` mechanism (validated; no torch here)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from privsilo.mechanisms.base import FederationShape, MechanismParams, keyword_or_count
from privsilo.mechanisms.pldp.settings import PAPER_BUDGETS, PAPER_RANGES, check_client_count, check_setting, client_value
from privsilo.mechanisms.pldp.upload import ClientPerturbation

NO_NAMES: dict[str, tuple[float, ...]] = {}


class PldpParams(MechanismParams):
    """``mechanism: {name: pldp, ...}``; see the PLDP-FL page of the documentation.

    ``ranges``: safe-range lengths L_i; ``centers``: centres c_i; ``budgets``: eps_i (per coordinate with
    ``coordinates: all``, per upload with ``coordinates: k``). Each is a paper setting's name (not for
    centres), one number, or a list with one entry per client.
    """

    perturb: Literal["weights", "update"] = "weights"
    """What each client perturbs with PDPM: `weights` (the local model, the paper) or `update` (the local model minus the global one)."""
    coordinates: Any = "all"
    """`all` (every coordinate with the client's budget, the paper) or an integer k in [1, d] (k coordinates sampled per upload, each with budget / k, scaled by d / k; d = the model's parameter count)."""
    ranges: Any = "tau2"
    """Safe-range lengths L_i: `tau1` (0.2, 0.4 in turn over the clients), `tau2` (0.2, 0.4, ..., 2.0 in turn), `tau3` (1.8, 2.0 in turn), one number for every client, or a list with one length > 0 per client."""
    budgets: Any = "eps2"
    """Budgets eps_i: `eps1` (0.1, 0.2 in turn), `eps2` (0.1, 0.2, ..., 1.0 in turn), `eps3` (0.9, 1.0 in turn), one number > 0, or a list with one per client; per coordinate with `coordinates: all`, per upload with k."""
    centers: Any = 0.0
    """Centres c_i of the safe ranges [c_i - L_i/2, c_i + L_i/2]: one number, or a list with one per client."""

    @field_validator("coordinates", mode="before")
    @classmethod
    def _check_coordinates(cls, value: Any) -> Any:
        return keyword_or_count(value, ("all",), allowed="'all' (every coordinate, the paper) or an integer k >= 1 (k sampled coordinates per upload)")

    @field_validator("ranges", mode="before")
    @classmethod
    def _check_ranges(cls, value: Any) -> Any:
        return check_setting(value, names=PAPER_RANGES, what="length", positive=True)

    @field_validator("budgets", mode="before")
    @classmethod
    def _check_budgets(cls, value: Any) -> Any:
        return check_setting(value, names=PAPER_BUDGETS, what="budget", positive=True)

    @field_validator("centers", mode="before")
    @classmethod
    def _check_centers(cls, value: Any) -> Any:
        return check_setting(value, names=NO_NAMES, what="centre", positive=False)

    def check_federation(self, federation: FederationShape) -> None:
        for key, what in (("ranges", "length"), ("budgets", "budget"), ("centers", "centre")):
            try:
                check_client_count(getattr(self, key), num_clients=federation.num_silos, what=what)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
        if self.coordinates != "all" and self.coordinates > federation.num_parameters:
            raise ValueError(
                f"coordinates: must be at most d = {federation.num_parameters}, the model's number of parameters "
                "(or 'all')"
            )

    def server_optimizer_refusal(self) -> str | None:
        if self.perturb == "weights":
            return (
                "perturb 'weights' averages model weights clipped into the safe ranges and perturbed, not "
                "updates: an optimiser step on them can leave the safe ranges, and the clients' clipping then undoes "
                "it; use mechanism.perturb: update"
            )
        return None

    def client(self, client: int) -> ClientPerturbation:
        """Client (silo) ``client``'s PDPM parameters."""
        return ClientPerturbation(
            length=client_value(self.ranges, names=PAPER_RANGES, client=client),
            center=client_value(self.centers, names=NO_NAMES, client=client),
            epsilon=client_value(self.budgets, names=PAPER_BUDGETS, client=client),
            coordinates=None if self.coordinates == "all" else self.coordinates,
        )
