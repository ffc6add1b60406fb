"""``audit.score: likelihood``: score DP-SGD canary records round by round with the subsampled Gaussian's
likelihood ratio, instead of summing their host silo's uploads over the rounds.

In a round of ``T`` local steps at Poisson rate ``q`` (``mechanism.sampling_rate``, else ``batch_size`` over the
silo's records, which that mode treats as public), a canary record adds its clipped gradient ``C u_i`` in each
step it is drawn in, so its host silo's upload ``Delta_r`` (the model change), projected on ``-u_i`` and scaled by
``batch_size / (lr C)``, is ``s_r = K_r + N(0, T sigma^2)`` with ``K_r ~ Binomial(T, q)`` if the canary is
included and ``s_r = N(0, T sigma^2)`` if not (plain SGD steps; the data's own gradients along ``u_i`` are left
out, as are second-order effects). The log-likelihood ratio of "included" over "excluded" is then, per round,

    log sum_k Binomial(k; T, q) exp((k s_r - k^2 / 2) / (T sigma^2)),

and the rounds, whose draws are independent, add up (Neyman-Pearson: per canary the most powerful statistic of its
rounds under this model). Where the model is off (FedProx's pull, data gradients along ``u_i``) the score is less
powerful, never unsound: Steinke et al.'s and Mahloujifar et al.'s bounds hold for any score computed from the
server's view alone, and this one reads the uploads and the scenario's public parameters, never the inclusion coins.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np
from scipy.special import logsumexp
from scipy.stats import binom

from privsilo.simulator.audit.canaries import CanaryPlan


def round_log_likelihood_ratio(values: np.ndarray, *, rate: float, steps: int, noise_multiplier: float) -> np.ndarray:
    """``log sum_k Binomial(k; steps, rate) exp((k s - k^2 / 2) / (steps sigma^2))`` of each normalised round value
    ``s`` (the canary's count of draws plus Gaussian noise of ``steps sigma^2``, in units of one draw)."""
    if noise_multiplier <= 0.0:
        raise ValueError(f"the likelihood score needs noise: noise_multiplier {noise_multiplier!r}")
    draws = np.arange(steps + 1, dtype=np.float64)
    variance = steps * noise_multiplier**2
    terms = binom.logpmf(draws, steps, rate) + (np.multiply.outer(values, draws) - draws**2 / 2.0) / variance
    return logsumexp(terms, axis=-1)


def uploaded_changes(federation: Any) -> Iterator[tuple[int, np.ndarray]]:
    """Each silo's upload in the server's inbox after a round, FedAvg's ``[weight x delta, weight]`` read as the
    model change ``delta``."""
    for silo, message in federation.server_inbox().items():
        values = np.asarray(message.values, dtype=np.float64)
        yield silo, values[:-1] / values[-1]


class UploadLikelihoods:
    """Called after each round (``run``'s ``on_round``): projects each silo's upload on its hosted canaries'
    directions, normalises it to draws of one canary (``batch_size / (lr C)``, from the scenario) and adds each
    canary's round log-likelihood ratio to its score. A silo that uploads nothing in a round adds nothing."""

    def __init__(self, scenario: Any, plan: CanaryPlan) -> None:
        self.plan, self.training, self.params = plan, scenario.federation, scenario.mechanism.params
        self.scale = self.training.batch_size / (self.training.lr * self.params.max_grad_norm)
        self.scores = np.zeros(plan.count)

    def __call__(self, federation: Any) -> None:
        for silo, change in uploaded_changes(federation):
            hosted = np.flatnonzero(self.plan.hosts == silo)
            # a canary record's direction is a gradient, which the steps descend: its draws push the change along -u_i
            draws = -self.scale * self.plan.projections(change, hosted)
            # the silo's rate: sampling_rate, else batch_size / its records (public in that mode: its events show it)
            rate = self.params.rate(batch_size=self.training.batch_size, num_records=len(federation.parts[silo]))
            self.scores[hosted] += round_log_likelihood_ratio(draws, rate=rate, steps=self.training.local_steps,
                                                              noise_multiplier=self.params.noise_multiplier)
