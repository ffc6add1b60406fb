"""An independent evaluation of the Poisson-subsampled Gaussian's RDP for the tests, sharing no code with
``mechanisms``: log A_a(q) (Mironov, Talwar, Zhang 2019, Sec. 3) in 30-digit arithmetic, as the finite binomial
sum at integer orders and by numerical integration of its definition at fractional ones."""
from __future__ import annotations

from functools import lru_cache

import mpmath

DIGITS = 30


@lru_cache(maxsize=None)
def log_moment(q: float, sigma: float, order: float) -> mpmath.mpf:
    """log A_a(q) = log E_{z ~ N(0, sigma^2)} [(1 - q + q exp((2z - 1) / (2 sigma^2)))^a].

    Integer a: the binomial sum over l = 0..a of C(a, l) (1-q)^(a-l) q^l exp(l(l-1) / (2 sigma^2)).
    Fractional a: the expectation integrated numerically, split where the integrand changes scale.
    """
    with mpmath.workdps(DIGITS):
        q, sigma = mpmath.mpf(q), mpmath.mpf(sigma)
        if float(order).is_integer():
            a = int(order)
            return mpmath.log(
                mpmath.fsum(
                    mpmath.binomial(a, l) * (1 - q) ** (a - l) * q**l * mpmath.exp(l * (l - 1) / (2 * sigma**2))
                    for l in range(a + 1)
                )
            )
        a = mpmath.mpf(order)

        def integrand(z):
            return mpmath.npdf(z, 0, sigma) * (1 - q + q * mpmath.exp((2 * z - 1) / (2 * sigma**2))) ** a

        cuts = [-mpmath.inf, -20 * sigma, -5 * sigma, 0, 5 * sigma, 20 * sigma + a, mpmath.inf]
        return mpmath.log(mpmath.quad(integrand, cuts))


def step_rdp(q: float, sigma: float, order: float) -> mpmath.mpf:
    """RDP of one step at ``order``: log A_a(q) / (a - 1); 0 at q = 0."""
    if q == 0:
        return mpmath.mpf(0)
    return log_moment(float(q), float(sigma), float(order)) / (mpmath.mpf(order) - 1)


def balle_epsilon(rho, order: float, delta: float) -> float:
    """Balle et al. 2020, Thm. 21: rho + log((a-1)/a) - (log delta + log a) / (a - 1)."""
    with mpmath.workdps(DIGITS):
        a = mpmath.mpf(order)
        return float(rho + mpmath.log((a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1))
