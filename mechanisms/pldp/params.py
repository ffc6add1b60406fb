"""YAML parameters of the ``pldp`` mechanism (validated; no torch here)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from mechanisms.base import FederationShape, MechanismParams
from mechanisms.pldp.settings import PAPER_BUDGETS, PAPER_RANGES, check_client_count, check_setting, client_value
from mechanisms.pldp.upload import ClientPerturbation

NO_NAMES: dict[str, tuple[float, ...]] = {}


class PldpParams(MechanismParams):
    """``mechanism: {name: pldp, ...}``; see the README's PLDP-FL section.

    ``ranges``: safe-range lengths L_i; ``centers``: centres c_i; ``budgets``: eps_i (per coordinate with
    ``coordinates: all``, per upload with ``coordinates: k``). Each is a paper setting's name (not for
    centres), one number, or a list with one entry per client.
    """

    perturb: Literal["weights", "update"] = "weights"
    coordinates: Any = "all"
    ranges: Any = "tau2"
    budgets: Any = "eps2"
    centers: Any = 0.0

    @field_validator("coordinates", mode="before")
    @classmethod
    def _check_coordinates(cls, value: Any) -> Any:
        if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError("must be 'all' (every coordinate, the paper) or an integer k >= 1 (k sampled coordinates per upload)")

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

    def client(self, client: int) -> ClientPerturbation:
        """Client (silo) ``client``'s PDPM parameters."""
        return ClientPerturbation(
            length=client_value(self.ranges, names=PAPER_RANGES, client=client),
            center=client_value(self.centers, names=NO_NAMES, client=client),
            epsilon=client_value(self.budgets, names=PAPER_BUDGETS, client=client),
            coordinates=None if self.coordinates == "all" else self.coordinates,
        )
