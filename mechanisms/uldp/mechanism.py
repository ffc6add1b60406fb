"""``uldp``: user-level DP across silos (ULDP-FL, Kato et al., VLDB 2024).

Neighbouring relation: two federations differ in *all* records of one user, in every silo. Variants
(``variant``):

* ``naive`` (Algorithm 1): local SGD per silo, the silo's delta clipped to ``C``, noise ``N(0, sigma^2 C^2 |S|)``
  per silo; ``x <- x + eta_g * sum / |S|``.
* ``avg`` / ``avg_w`` (Algorithm 3, Eq. 3): per user, local training from ``x_t`` on the user's records in the
  silo; each user delta clipped to ``C`` and weighted by ``w_{s,u}`` (``1/|S|``, or ``n_{s,u}/N_u``); the silo
  adds ``N(0, sigma^2 C^2 / |S|)``; ``x <- x + eta_g * sum / (q |U| |S|)``.
* ``sgd`` (Algorithm 3): one clipped gradient per user (weights ``1/|S|``); ``x <- x - eta_g * sum / (q |U| |S|)``.
* ``group`` (Algorithm 2): at most ``k`` records per user across silos (round-robin over silos), record-level
  DP-SGD in every silo, ``x <- x + eta_g * sum / |S|``; accounted by RDP group privacy.

User-level sub-sampling (Algorithm 4, Remark 1): the server Poisson-samples users with rate ``q = user_rate``
every round and the weights of the users **not** sampled are set to 0 (Algorithm 4 prints the opposite, a typo).
For ``naive``, an unsampled user's records are left out of the round's local training. ``|U|`` is the public
``data.users.count``. Accounting: :mod:`privsilo.mechanisms.uldp.accountant`. Every silo must take part in every round
(client sampling would drop a silo's share of the noise), so ``federation.client_rate`` must be 1.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from privsilo.mechanisms.base import GlobalState, Mechanism, PrivacyAccountant, ServerMechanism, SiloContext, SiloMechanism
from privsilo.mechanisms.uldp.variants import Variant
from privsilo.mechanisms.uldp.params import UldpParams
from privsilo.mechanisms.uldp.weights import UserSample, sample_users

if TYPE_CHECKING:
    from privsilo.protocols.base import ServerProtocol, SiloProtocol

PER_USER_VARIANTS = (Variant.AVG, Variant.AVG_W, Variant.SGD)


class UldpServer(ServerMechanism):
    """Samples the round's users (the round plan) and applies ``x + sign * eta_g * sum / Z``."""

    def __init__(self, params: UldpParams, *, num_silos: int, num_users: int) -> None:
        self.params = params
        self.variant = Variant(params.variant)
        self.num_users = num_users
        if self.variant in PER_USER_VARIANTS:
            self.divisor = params.user_rate * num_users * num_silos
        else:
            self.divisor = float(num_silos)
        self.sign = -1.0 if self.variant is Variant.SGD else 1.0

    def round_plan(self, rng: np.random.Generator, *, round_index: int) -> UserSample | None:
        if self.params.user_rate == 1.0:
            return None
        return sample_users(self.num_users, user_rate=self.params.user_rate, rng=rng)

    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        (params,) = state
        return (params + self.sign * self.params.global_lr * contribution_sum / self.divisor,)


class Uldp(Mechanism):
    """ULDP-FL (see the module docstring)."""

    name = "uldp"
    privacy_unit = "user"
    Params = UldpParams
    needs_users = True
    needs_every_silo = True
    # Not attackable: the upload sums per-user clipped deltas with per-user weights, which the attack does not model.
    audit_units = ("user",)

    def silo(self, context: SiloContext) -> SiloMechanism:
        from privsilo.mechanisms.uldp.silo import build_silo  # torch-side code, imported by the silos only

        return build_silo(context, self.params)

    def server(self) -> ServerMechanism:
        raise TypeError("uldp's server needs the federation's sizes; use server_for(num_silos=..., num_users=...)")

    def server_for(self, *, num_silos: int, num_users: int | None) -> ServerMechanism:
        if num_users is None:
            raise ValueError("uldp needs data.users")
        return UldpServer(self.params, num_silos=num_silos, num_users=num_users)

    def brings_protocol(self) -> bool:
        """``weighting: private`` brings the private weighting protocol (Paillier)."""
        return self.params.weighting == "private"

    def silo_protocol(self, context: SiloContext, *, fractional_bits: int, min_participants: int) -> SiloProtocol | None:
        """``weighting: private``: the private weighting protocol (Paillier), given this silo's own counts only."""
        if not self.brings_protocol():
            return None
        from privsilo.protocols.private_weighting.silo import PwpSilo

        histogram = np.asarray(context.user_histogram)
        length = sum(p.numel() for p in context.model.parameters())
        config = self._weighting_config(num_silos=histogram.shape[0], num_users=histogram.shape[1], length=length,
                                        fractional_bits=fractional_bits, min_participants=min_participants)
        return PwpSilo(context.silo_id, config=config, counts=histogram[context.silo_id], planned_rounds=context.training.rounds)

    def server_protocol(
        self, *, num_silos: int, num_users: int | None, length: int, fractional_bits: int, min_participants: int
    ) -> ServerProtocol | None:
        if not self.brings_protocol():
            return None
        from privsilo.protocols.private_weighting.server import PwpServer

        if num_users is None:
            raise ValueError("uldp needs data.users")
        return PwpServer(config=self._weighting_config(num_silos=num_silos, num_users=num_users, length=length,
                                                      fractional_bits=fractional_bits, min_participants=min_participants))

    def _weighting_config(self, *, num_silos: int, num_users: int, length: int, fractional_bits: int, min_participants: int):
        from privsilo.protocols.private_weighting import PwpConfig

        return PwpConfig(
            num_users=num_users, num_silos=num_silos, length=int(length), max_abs_delta=self.params.max_grad_norm,
            fractional_bits=fractional_bits, key_bits=self.params.paillier_key_bits,
            max_records_per_user=self.params.max_records_per_user, min_participants=min_participants,
        )

    @classmethod
    def gdp_mu_star(cls, events: Mapping[int, Sequence[Any]], *, rounds: int, claims: Mapping[str, Any],
                    budget: float | None = None) -> float:
        """The user-level Gaussian rounds (every silo reports each; counted once) at their user rates (the audit
        refuses ``group``, whose claim is not of this form)."""
        from privsilo.mechanisms.events import PoissonGaussianEvent, UserLevelGaussianEvent
        from privsilo.mechanisms.gdp import merged_schedule, schedule_mu

        held = {e.round_index: e for silo in events.values() for e in silo if isinstance(e, UserLevelGaussianEvent)}
        return schedule_mu(merged_schedule(PoissonGaussianEvent(e.user_rate, e.noise_multiplier, 1) for _, e in sorted(held.items())))

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        from privsilo.mechanisms.gdp import UPPER_ESTIMATE

        return f"the user-level Gaussian rounds at their user rates; {UPPER_ESTIMATE} (exact at rate 1)"

    def accountant(self) -> PrivacyAccountant:
        from privsilo.mechanisms.uldp.accountant import UldpAccountant  # Opacus (torch): only where a run accounts

        params = self.params
        return UldpAccountant(
            variant=params.variant,
            delta=params.delta,
            group_rounding=params.group_rounding,
            group_k_public=not isinstance(params.group_k, str),
            accountant=params.accountant,
        )

    def assumed_public(self) -> tuple[str, ...]:
        public = ["the number of users |U| (data.users.count: the divisor of the update)"]
        if self.params.variant == "group":
            public.append(
                "the records each silo keeps under the k-per-user limit (they set the silo's record sampling rate "
                "batch_size / kept; a silo that keeps none still uploads its noisy steps)"
            )
        if self.params.weighting == "private":
            public.append(
                "which users have no record in any silo (N_u = 0): the private weighting protocol's server sees "
                "r_u N_u = 0 for them at set-up (Kato et al.'s Protocol 1 does too)"
            )
        return tuple(public)

    @classmethod
    def sweep_plotter(cls) -> Callable[..., None]:
        from privsilo.mechanisms.uldp.plots import plot_sweep  # matplotlib: only where a sweep writes its plots

        return plot_sweep
