"""An independent evaluation of rPDP-FL's accountant for the tests, written from the paper (Liu et al., CCS 2024,
Lemma 4, Lemma 6, Theorem 1) at integer RDP orders (log A_a from ``tests.support.rdp_reference``), sharing no code with ``mechanisms``."""
from __future__ import annotations

from functools import lru_cache

import mpmath

from tests.support.rdp_reference import log_moment

DIGITS = 50


@lru_cache(maxsize=None)
def lemma6_epsilon(q, *, sigma, rounds, local_steps, client_rate, delta, conversion, orders) -> float:
    """Theorem 1 epsilon of T = ``rounds`` rounds of Lemma 6 (``client_rate`` = 1 gives ``rounds`` realised rounds
    seen by the server), minimised over the integer ``orders``; 0 where nothing was released."""
    if q == 0 or rounds == 0:
        return 0.0
    with mpmath.workdps(DIGITS):
        lam, delta = mpmath.mpf(client_rate), mpmath.mpf(delta)
        best = mpmath.inf
        for a in (int(order) for order in orders):
            rho_tau = local_steps * log_moment(float(q), float(sigma), float(a)) / (a - 1)
            rho = rounds * mpmath.log(1 - lam + lam * mpmath.exp((a - 1) * rho_tau)) / (a - 1)
            if conversion == "seed":
                eps = rho + mpmath.log(1 / delta) / (a - 1)
            else:
                eps = rho + mpmath.log(mpmath.mpf(a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)
            best = min(best, eps)
        return float(best)
