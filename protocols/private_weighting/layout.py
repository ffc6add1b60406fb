"""Sizes of the private weighting protocol: headroom, slot packing and the precision bound (no crypto here, so
scenario validation can check them cheaply).

Numbers (Kato et al., VLDB 2024, Protocol 1 and Algorithm 5, as changed by ``privsilo.protocols.private_weighting``):

* ``C_LCM = lcm(1, ..., N_max)``: ``C_LCM n_{s,u} / N_u`` is an integer for every ``N_u <= N_max``. It has about
  ``1.44 N_max`` bits (2,878 at ``N_max = 2000``).
* Set-up converts each silo's encrypted ``C_LCM n_{s,u} / N_u`` into a fixed-point weight with ``F =
  WEIGHT_FRACTIONAL_BITS`` bits under an additive mask of ``bits(C_LCM) + KAPPA`` bits (statistical hiding
  ``2^-KAPPA``). The masked value must stay below the modulus: **headroom** ``bits(C_LCM) + KAPPA + 2 <= key
  bits``. This is the only place ``C_LCM`` meets the modulus: the per-round plaintexts are fixed-point numbers.
* Per round, the values ``sum_{s,u} w_{s,u} Delta_{s,u,j} + sum_s z_{s,j}`` are packed ``K`` to a ciphertext in
  signed slots of ``L = F + 64`` bits: ``F`` weight bits plus the 64-bit range of the shared
  [`FixedPointCodec`][privsilo.protocols.fixed_point.FixedPointCodec] built for sums of ``|U| + |S|`` values (its headroom bits keep
  every slot sum below ``2^(L-1)``). ``K = floor((key bits - 2) / L)``: 31 at 3,072 bits.
* **Precision** (per coordinate, against the plain float64 weighted sum): per-user deltas are encoded by
  truncation (error < ``P = 2^-f`` each, and a clipped delta stays clipped), weights carry ``|w_hat - w| <=
  (|S| w + 1) 2^-F`` and the noise is encoded on the finer grid ``2^-(F+f)``, so

      |private - plain| <= |A| P + (|A| |S| + |A_pairs|) C 2^-F + |S| 2^-(F+f) + 2^-52 sum_s |z_s|

  with ``|A|`` the users taking part, ``|A_pairs| <= |A| |S|`` the (silo, user) pairs with records and ``C`` the
  clipping norm; at most ``|U| P + 2 |U| |S| C 2^-F`` plus float rounding. The paper's Theorem 4 claims ``P``:
  rounding errors add up over users and silos.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

WEIGHT_FRACTIONAL_BITS = 32
"""F: fixed-point bits of the converted weights n_{s,u}/N_u (error 2^-F per weight, well below P)."""
KAPPA = 128
"""Statistical security of the additive masks of the weight conversion (the server learns 2^-KAPPA at most)."""
VALUE_BITS = 64
"""Bits of the fixed-point codec's signed range; a slot holds F + VALUE_BITS bits."""


class HeadroomError(ValueError):
    """The protocol's numbers do not fit the Paillier modulus; ``field`` names the setting to change."""

    def __init__(self, field: str, value: int, message: str) -> None:
        super().__init__(message)
        self.field, self.value, self.message = field, value, message

    def __str__(self) -> str:
        return self.message


@lru_cache(maxsize=8)
def lcm_up_to(max_records_per_user: int) -> int:
    """``C_LCM = lcm(1, ..., N_max)``."""
    return math.lcm(*range(1, max_records_per_user + 1))


def conversion_bits(max_records_per_user: int) -> int:
    """Bits the weight conversion needs below the modulus: ``bits(C_LCM) + KAPPA + 2``."""
    return lcm_up_to(max_records_per_user).bit_length() + KAPPA + 2


def largest_max_records(key_bits: int) -> int:
    """The largest ``N_max`` whose conversion fits a ``key_bits`` modulus (0 if none)."""
    n_max, running = 0, 1
    while True:
        running = math.lcm(running, n_max + 1)
        if running.bit_length() + KAPPA + 2 > key_bits:
            return n_max
        n_max += 1


@dataclass(frozen=True)
class SlotLayout:
    """``slots`` signed values of ``slot_bits`` bits packed into one plaintext (slot k at bit ``k * slot_bits``)."""

    slot_bits: int
    slots: int

    def ciphertexts(self, length: int) -> int:
        """Ciphertexts needed for ``length`` values."""
        return -(-length // self.slots)

    def slots_in(self, ciphertext: int, length: int) -> int:
        """Values packed into ciphertext number ``ciphertext`` of ``length`` values (the last may be partial)."""
        return min(self.slots, length - ciphertext * self.slots)


def check_conversion(*, key_bits: int, max_records_per_user: int) -> None:
    """Raise ``HeadroomError`` naming ``max_records_per_user`` when the weight conversion's ``bits(C_LCM) + KAPPA
    + 2`` exceeds a ``key_bits`` modulus; the message says which ``N_max`` and which key size would fit."""
    needed = conversion_bits(max_records_per_user)
    if needed > key_bits:
        raise HeadroomError(
            "max_records_per_user", max_records_per_user,
            f"lcm(1..{max_records_per_user}) has {lcm_up_to(max_records_per_user).bit_length()} bits; with the "
            f"{KAPPA}-bit statistical mask of the weight conversion it needs a modulus of at least {needed} bits, "
            f"but the Paillier key has {key_bits}: lower max_records_per_user to at most "
            f"{largest_max_records(key_bits)} (no user may have more records) or raise paillier_key_bits to {needed} or more",
        )


def check_headroom(*, key_bits: int, max_records_per_user: int, fractional_bits: int, num_users: int, num_silos: int) -> SlotLayout:
    """Check that the protocol's numbers fit a ``key_bits`` modulus and return the slot layout.

    Raises ``HeadroomError`` naming ``max_records_per_user`` (the conversion's ``bits(C_LCM) + KAPPA + 2`` exceeds
    the key; the message says which ``N_max`` fits and which key size would fit) or ``fractional_bits`` (the
    codec has no room for values with that precision summed over ``num_users + num_silos`` terms).
    """
    from privsilo.protocols.fixed_point import FixedPointCodec

    check_conversion(key_bits=key_bits, max_records_per_user=max_records_per_user)
    try:
        FixedPointCodec(fractional_bits=fractional_bits, modulus_bits=VALUE_BITS, max_summands=num_users + num_silos)
    except ValueError as exc:
        raise HeadroomError(
            "fractional_bits", fractional_bits,
            f"precision P = 2^-{fractional_bits} leaves no headroom for sums of {num_users} users and {num_silos} "
            f"silos in {VALUE_BITS}-bit slots ({exc}); use fewer fractional bits",
        ) from None
    slot_bits = WEIGHT_FRACTIONAL_BITS + VALUE_BITS
    return SlotLayout(slot_bits=slot_bits, slots=(key_bits - 2) // slot_bits)


def precision_bound(
    *, users: int, pairs: int, num_silos: int, fractional_bits: int, max_abs_delta: float, noise_abs_sum: float = 0.0
) -> float:
    """The bound of the module docstring on ``|private - plain|`` per coordinate (before the final float rounding
    of the two results, relative ``2^-52``): ``users`` taking part, ``pairs`` (silo, user) pairs with records,
    ``max_abs_delta`` the clipping norm C, ``noise_abs_sum`` the coordinate's ``sum_s |z_s|``."""
    precision = math.ldexp(1.0, -fractional_bits)
    weight_error = math.ldexp((users * num_silos + pairs) * max_abs_delta, -WEIGHT_FRACTIONAL_BITS)
    noise_error = math.ldexp(num_silos, -(WEIGHT_FRACTIONAL_BITS + fractional_bits)) + math.ldexp(noise_abs_sum, -52)
    return users * precision + weight_error + noise_error
