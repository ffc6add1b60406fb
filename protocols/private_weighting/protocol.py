"""Private weighting protocol for ULDP-AVG-w (Kato et al., VLDB 2024, Protocol 1 and Algorithm 5), made fast and
fixed: the server learns ``sum_{s,u} (n_{s,u} / N_u) clip(Delta_{s,u}) + sum_s z_s`` and nothing else; no silo
learns another silo's counts ``n_{s,u}`` or any total ``N_u``.

Set-up (stages ``PwpStage``, relayed by the server):

1. ``ADVERTISE_KEYS``: silos send X25519 public keys; the server generates its Paillier key pair (3,072 bits by
   default) and answers every silo with ``PwpDirectory`` (modulus n, all public keys).
2. ``AGREE_KEYS``: silos derive pairwise keys (secure aggregation's X25519 + HKDF); the lead silo (lowest id)
   draws a 32-byte seed R from the OS and seals it for each other silo (ChaCha20-Poly1305 under a key derived
   from the pair's key), relayed by the server. (The paper's code draws R, the masks and r_u from numpy with
   32-bit seeds; here every secret comes from ``os.urandom`` or an AES-256-CTR stream keyed by an agreed secret.)
3. ``BLIND_COUNTS``: every silo derives the blinds ``r_u`` (uniform in ``Z_n^*``) from R and sends
   ``r_u n_{s,u} + pairwise masks mod n``; the server sums to ``B_u = r_u N_u``. Users with ``B_u = 0`` have
   ``N_u = 0``, no inverse: they are excluded (``PwpServer.excluded_users``). The server sends
   ``Enc((r_u N_u)^-1)`` for the others.
4. ``CONVERT_WEIGHTS`` (not in the paper): each silo computes ``Enc(B_inv_u)^(n_{s,u} r_u C_LCM mod n) =
   Enc(C_LCM n_{s,u} / N_u)``, an integer below ``C_LCM = lcm(1..N_max)``, adds a mask ``rho`` of ``bits(C_LCM) +
   128`` bits, rerandomises and sends it (for every user, so the server does not learn which users a silo has);
   the server decrypts ``V + rho``, returns ``Enc(floor((V + rho) (2^F - |S|) / C_LCM))`` and the silo subtracts
   ``floor(rho (2^F - |S|) / C_LCM)``. Result: ``Enc(w_hat)`` with ``w_hat = floor(w (2^F - |S|))`` or one more,
   ``w = n_{s,u} / N_u``, so ``sum_s w_hat <= 2^F``: a user's weights still sum to at most 1.
5. ``BUILD_TABLES``: each silo builds fixed-base window tables of its users' ``Enc(w_hat)`` (and, where they pay
   for themselves over the run's rounds, of ``Enc(w_hat)^(2^(L k))`` for the slots k: see
   ``privsilo.protocols.private_weighting.tables``).

Each round (``PwpSilo.protect`` / ``PwpServer.combine``): a silo encodes its users' clipped deltas by
truncation (``e = trunc(Delta 2^f)``, so a clipped delta stays clipped) and computes, for ``K`` parameters per
ciphertext, ``prod_k prod_u Enc(w_hat_u)^(e_{u,k} 2^(L k))`` (table look-ups: one multiplication per user,
parameter and nonzero window digit, no squarings; bases shared by every parameter; negative exponents in a
second product, inverted in one batch; Horner's rule ``acc^(2^(L shifts))`` over the groups of ``shifts`` slots
the tables shift, ``shifts = 1`` without shifted tables), adds
its noise encoded on the grid ``2^-(F+f)`` as a plaintext (one multiplication per ciphertext), rerandomises its
share (every ``|P|``-th ciphertext) and multiplies every ciphertext by pairwise masks uniform in ``Z_{n^2}^*``
that cancel in the product over the participants. The server multiplies the silos' messages, decrypts
``ceil(d/K)`` ciphertexts by CRT, unpacks the signed slots and divides by ``2^(F+f)``.

Where the paper's protocol leaks, and what is done instead:

* Per-parameter ciphertexts without fresh randomness: the server encrypted ``Enc(B_inv_u)`` and knows its
  randomness, so after decrypting it can strip the plaintext and look at ``rho_u^(n k e)``: a parameter whose
  deltas are all 0 gives exactly 1, equal deltas give equal values, and with guesses of ``n_{s,u}, N_u`` a
  small-exponent discrete log recovers a silo's deltas. Here each silo's message is a uniform element of
  ``Z_{n^2}^*`` (multiplicative pairwise masks) and their product carries a fresh uniform n-th residue per
  ciphertext.
* Low-order digits: the paper adds the noise as ``Encode(z) C_LCM`` while the weighted sum is a multiple of
  ``C_LCM / N_u``, so the decrypted integer modulo ``C_LCM`` reveals the un-noised fractional parts of
  ``sum_u a_u / N_u`` (their denominators are the ``N_u``). Here the noise is encoded on the same grid as the
  weighted deltas (and dithered below its float precision), so no digit escapes it.

Threat model: honest-but-curious server and silos, no dropouts. A silo colluding with the server learns every
``N_u`` (it knows ``r_u``, the server ``r_u N_u``), as the paper states. The server learns which users have no
record anywhere (``N_u = 0``); the silos learn the round's user sample (privsilo's plan, as in plain mode).
Sizes, headroom and the precision bound: [`privsilo.protocols.private_weighting.layout`][privsilo.protocols.private_weighting.layout]; the parties:
[`privsilo.protocols.private_weighting.silo`][privsilo.protocols.private_weighting.silo] (``PwpSilo``) and [`privsilo.protocols.private_weighting.server`][privsilo.protocols.private_weighting.server] (``PwpServer``).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from gmpy2 import mpz

from privsilo.protocols.base import ProtocolStateError
from privsilo.protocols.crypto_random import CryptoRandom
from privsilo.protocols.fixed_point import FixedPointCodec
from privsilo.protocols.paillier import check_key_bits
from privsilo.protocols.private_weighting.layout import KAPPA, VALUE_BITS, WEIGHT_FRACTIONAL_BITS, SlotLayout, check_headroom, lcm_up_to
from privsilo.protocols.secure_aggregation import mask_stream

TABLE_BUDGET = 1 << 19
"""Window-table entries a silo may hold (about 420 MB of ciphertexts at 3,072 bits)."""
_LABEL = b"privsilo private weighting "


class PwpStage(enum.Enum):
    """Set-up stages, in order (the per-round steps are ``PwpSilo.protect`` and ``PwpServer.combine``)."""

    ADVERTISE_KEYS = enum.auto()
    AGREE_KEYS = enum.auto()
    BLIND_COUNTS = enum.auto()
    CONVERT_WEIGHTS = enum.auto()
    BUILD_TABLES = enum.auto()


@dataclass(frozen=True)
class PwpConfig:
    """The public parameters every party agrees on. ``length`` is the model size d, ``max_abs_delta`` the clipping
    norm C, ``fractional_bits`` f (precision P = 2^-f), ``max_records_per_user`` N_max. Raises ``ValueError``
    for a key below 2,048 bits (unless ``insecure_test_key``, for tests) and ``HeadroomError`` when the numbers
    do not fit the key."""

    num_users: int
    num_silos: int
    length: int
    max_abs_delta: float
    fractional_bits: int = 24
    key_bits: int = 3072
    max_records_per_user: int = 2000
    min_participants: int = 2
    insecure_test_key: bool = False

    def __post_init__(self) -> None:
        for name in ("num_users", "num_silos", "length", "max_records_per_user"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not 2 <= self.min_participants <= self.num_silos:
            raise ValueError(f"min_participants must be in [2, {self.num_silos}], got {self.min_participants!r}")
        if not (math.isfinite(self.max_abs_delta) and self.max_abs_delta > 0):
            raise ValueError(f"max_abs_delta must be a positive number, got {self.max_abs_delta!r}")
        check_key_bits(self.key_bits, insecure_test_key=self.insecure_test_key)
        if self.layout.slots < 1:  # computing the layout raises HeadroomError when the numbers do not fit
            raise ValueError(f"a {self.key_bits}-bit key holds no {self.layout.slot_bits}-bit slot")
        if self.max_abs_delta > self.codec.max_abs_value:
            raise ValueError(f"max_abs_delta {self.max_abs_delta} exceeds the codec's range {self.codec.max_abs_value}")

    @cached_property
    def layout(self) -> SlotLayout:
        return check_headroom(
            key_bits=self.key_bits, max_records_per_user=self.max_records_per_user,
            fractional_bits=self.fractional_bits, num_users=self.num_users, num_silos=self.num_silos,
        )

    @cached_property
    def codec(self) -> FixedPointCodec:
        """The shared fixed-point codec, with headroom for sums of ``num_users + num_silos`` values."""
        return FixedPointCodec(
            fractional_bits=self.fractional_bits, modulus_bits=VALUE_BITS, max_summands=self.num_users + self.num_silos
        )

    @cached_property
    def c_lcm(self) -> int:
        return lcm_up_to(self.max_records_per_user)

    @property
    def weight_scale(self) -> int:
        """``2^F - |S|``: the converted weights of a user then sum to at most ``2^F``."""
        return (1 << WEIGHT_FRACTIONAL_BITS) - self.num_silos

    @cached_property
    def delta_bits(self) -> int:
        """b with ``|trunc(Delta 2^f)| < 2^b`` for every clipped delta (a 2^-40 margin for float clipping)."""
        return int(math.floor(math.ldexp(self.max_abs_delta * (1 + 2.0**-40), self.fractional_bits))).bit_length()

    @property
    def grid_bits(self) -> int:
        """``F + f``: the round's values are integers times ``2^-(F+f)``."""
        return WEIGHT_FRACTIONAL_BITS + self.fractional_bits

    def slot_bound(self) -> int:
        """No slot of an honest round exceeds this in magnitude: ``2^F (|U| B + |S| (B + 1))``."""
        bound = self.codec.max_integer
        return (self.num_users * bound + self.num_silos * (bound + 1)) << WEIGHT_FRACTIONAL_BITS


def prg_residues(key: bytes, *, label: bytes, index: int, count: int, modulus: int) -> list[mpz]:
    """``count`` pseudorandom residues modulo ``modulus``, statistically uniform (``KAPPA`` extra bits each):
    secure aggregation's AES-256-CTR stream ([`mask_stream`][privsilo.protocols.secure_aggregation.mask_stream]) under
    ``HKDF-SHA256(key, label)``, at nonce ``index``."""
    subkey = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL + label).derive(key)
    words = (int(modulus).bit_length() + KAPPA + 63) // 64
    raw = mask_stream(subkey, round_index=index, length=count * words).astype("<u8", copy=False).tobytes()
    step = 8 * words
    modulus = mpz(modulus)
    return [mpz(int.from_bytes(raw[i * step:(i + 1) * step], "little")) % modulus for i in range(count)]


def encode_noise(noise: np.ndarray, *, codec: FixedPointCodec, extra_bits: int, random: CryptoRandom) -> list[int]:
    """Each noise value as the integer ``round(z 2^(f + extra_bits))``, range-checked by ``codec``; where the float
    has no bits that fine, a uniform dither of one float ulp fills the missing low digits (independent extra
    noise, so no digit of the weighted sum below the float's precision is left un-noised). A float's ulp is a power
    of two (below 2^64 within the codec's range), so the dither is the low bits of one random 64-bit word."""
    values = np.asarray(noise, dtype=np.float64)
    if values.size:
        codec.check_range(values)  # raises EncodingOverflowError beyond the codec's range
    rounded = np.rint(values * math.ldexp(1.0, codec.fractional_bits + extra_bits))  # exact: a power of two
    encoded = [int(value) for value in rounded.tolist()]
    spacing = np.spacing(np.abs(rounded))
    coarse = np.flatnonzero(spacing > 1)
    if coarse.size:
        ulps = spacing[coarse].astype(np.uint64)
        words = np.frombuffer(random.bytes(8 * coarse.size), dtype=np.uint64)
        dither = (words & (ulps - 1)).astype(np.int64) - (ulps // 2).astype(np.int64)
        for index, offset in zip(coarse.tolist(), dither.tolist()):
            encoded[index] += offset
    return encoded


def seed_aead(pairwise_key: bytes) -> ChaCha20Poly1305:
    """The AEAD that seals the shared seed R for one pair of silos (key: HKDF of their pairwise key)."""
    return ChaCha20Poly1305(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL + b"seed").derive(pairwise_key))


def seed_context(sender: int, recipient: int) -> bytes:
    """Associated data binding a sealed seed to its sender and recipient."""
    return _LABEL + sender.to_bytes(8, "big") + recipient.to_bytes(8, "big")


def expect_stage(stage: PwpStage, expected: PwpStage | None, who: str) -> None:
    """Refuse a set-up stage out of order."""
    if stage is not expected:
        raise ProtocolStateError(f"{who}: got setup stage {stage!r}, expected {expected!r}")


def next_stage(stage: PwpStage) -> PwpStage | None:
    """The set-up stage after ``stage`` (None after the last)."""
    stages = tuple(PwpStage)
    position = stages.index(stage)
    return stages[position + 1] if position + 1 < len(stages) else None


def expect_type(inbound: object, kind: type, who: str, stage: PwpStage) -> None:
    """Refuse an inbound message of the wrong type for ``stage``."""
    if not isinstance(inbound, kind):
        raise ProtocolStateError(f"{who}: {stage.name} needs a {kind.__name__}, got {type(inbound).__name__}")
