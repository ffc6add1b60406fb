"""Private weighting protocol for ULDP-AVG-w (Kato et al., VLDB 2024, Protocol 1 and Algorithm 5), made fast and
fixed: the server learns ``sum_{s,u} (n_{s,u} / N_u) clip(Delta_{s,u}) + sum_s z_s`` and nothing else; no silo
learns another silo's counts ``n_{s,u}`` or any total ``N_u``.

Set-up (stages ``PwpStage``, relayed by the server):

1. ``ADVERTISE_KEYS``: silos send X25519 public keys; the server generates its Paillier key pair (3,072 bits by
   default) and answers every silo with ``PwpDirectory`` (modulus n, all public keys).
2. ``AGREE_KEYS``: silos derive pairwise keys (secure aggregation's X25519 + HKDF); the lead silo (lowest id)
   draws a 32-byte seed R from the OS and seals it for each other silo (ChaCha20-Poly1305 under a key derived
   from the pair's key), relayed by the server. (The paper's code draws R, the masks and r_u from numpy with
   32-bit seeds; here every secret comes from ``os.urandom`` or a ChaCha20 stream keyed by an agreed secret.)
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
5. ``BUILD_TABLES``: each silo builds fixed-base window tables of its users' ``Enc(w_hat)``.

Each round (``PwpSilo.protect`` / ``PwpServer.combine``): a silo encodes its users' clipped deltas by
truncation (``e = trunc(Delta 2^f)``, so a clipped delta stays clipped) and computes, for ``K`` parameters per
ciphertext, ``prod_u Enc(w_hat_u)^(e_u + 2^b)`` slot by slot (table look-ups: ``W`` multiplications per user and
parameter, no squarings; multi-exponentiation over the users with bases shared by every parameter), packs the
slots by Horner's rule (``acc^(2^L)``), removes the offset ``2^b`` with one ciphertext per round, adds its noise
encoded on the grid ``2^-(F+f)`` as a plaintext (one multiplication per ciphertext), rerandomises its share
(every ``|P|``-th ciphertext) and multiplies every ciphertext by pairwise masks uniform in ``Z_{n^2}^*`` that
cancel in the product over the participants. The server multiplies the silos' messages, decrypts ``ceil(d/K)``
ciphertexts by CRT, unpacks the signed slots and divides by ``2^(F+f)``.

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
Sizes, headroom and the precision bound: :mod:`protocols.private_weighting_layout`.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Callable, ClassVar, Mapping

import gmpy2
import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from gmpy2 import mpz

from protocols.base import (
    ProtocolStateError,
    ServerProtocol,
    SiloProtocol,
    check_participants,
    check_round_index,
    collect_round_messages,
)
from protocols.crypto_random import CryptoRandom
from protocols.fixed_point import EncodingOverflowError, FixedPointCodec
from protocols.paillier import PaillierKeyPair, PaillierPublicKey, WindowTable, batch_invert, check_key_bits, choose_windows
from protocols.private_weighting_layout import (
    KAPPA,
    VALUE_BITS,
    WEIGHT_FRACTIONAL_BITS,
    SlotLayout,
    check_headroom,
    lcm_up_to,
)
from protocols.private_weighting_messages import (
    BlindedCounts,
    ConvertedWeights,
    EncryptedInverses,
    MaskedWeights,
    PackedCiphertexts,
    PwpDirectory,
    SealedSeeds,
    SeedDelivery,
    SetupDone,
    UserDeltas,
)
from protocols.secure_aggregation import (
    KeyAdvertisement,
    KeyAgreementDone,
    build_key_directory,
    derive_pairwise_keys,
    mask_stream,
)

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
    secure aggregation's ChaCha20 stream (:func:`~protocols.secure_aggregation.mask_stream`) under
    ``HKDF-SHA256(key, label)``, at nonce ``index``."""
    subkey = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL + label).derive(key)
    words = (int(modulus).bit_length() + KAPPA + 63) // 64
    raw = mask_stream(subkey, round_index=index, length=count * words).tobytes()
    step = 8 * words
    modulus = mpz(modulus)
    return [mpz(int.from_bytes(raw[i * step:(i + 1) * step], "little")) % modulus for i in range(count)]


def encode_noise(noise: np.ndarray, *, codec: FixedPointCodec, extra_bits: int, random: CryptoRandom) -> list[int]:
    """Each noise value as the integer ``round(z 2^(f + extra_bits))``, range-checked by ``codec``; where the float
    has no bits that fine, a uniform dither of one float ulp fills the missing low digits (independent extra
    noise, so no digit of the weighted sum below the float's precision is left un-noised)."""
    codec.to_integers(noise)  # raises EncodingOverflowError beyond the codec's range
    rounded = np.rint(np.ldexp(np.asarray(noise, dtype=np.float64), codec.fractional_bits + extra_bits))
    spacing = np.spacing(np.abs(rounded))
    encoded = []
    for value, ulp in zip(rounded.tolist(), spacing.tolist()):
        integer = int(value)
        if ulp > 1:
            integer += random.randbelow(int(ulp)) - int(ulp) // 2
        encoded.append(integer)
    return encoded


def _seed_aead(pairwise_key: bytes) -> ChaCha20Poly1305:
    return ChaCha20Poly1305(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL + b"seed").derive(pairwise_key))


def _seed_context(sender: int, recipient: int) -> bytes:
    return _LABEL + sender.to_bytes(8, "big") + recipient.to_bytes(8, "big")


def _expect(stage: PwpStage, expected: PwpStage | None, who: str) -> None:
    if stage is not expected:
        raise ProtocolStateError(f"{who}: got setup stage {stage!r}, expected {expected!r}")


def _expect_type(inbound: object, kind: type, who: str, stage: PwpStage) -> None:
    if not isinstance(inbound, kind):
        raise ProtocolStateError(f"{who}: {stage.name} needs a {kind.__name__}, got {type(inbound).__name__}")


class PwpSilo(SiloProtocol):
    """Silo side: ``counts[u]`` is ``n_{s,u}`` for every user u (this silo's own histogram only)."""

    def __init__(
        self,
        silo_id: int,
        *,
        config: PwpConfig,
        counts: np.ndarray,
        random: CryptoRandom | None = None,
        private_key: X25519PrivateKey | None = None,
    ) -> None:
        counts = np.asarray(counts)
        if counts.shape != (config.num_users,) or counts.min(initial=0) < 0:
            raise ValueError(f"counts must hold {config.num_users} non-negative record counts, got shape {counts.shape}")
        if counts.max(initial=0) > config.max_records_per_user:
            raise ValueError(f"silo {silo_id} holds {counts.max()} records of one user, above N_max = {config.max_records_per_user}")
        self.silo_id = silo_id
        self.config = config
        self._counts = tuple(int(c) for c in counts)
        self._random = random or CryptoRandom()
        self._private_key: X25519PrivateKey | None = private_key or X25519PrivateKey.from_private_bytes(self._random.bytes(32))
        self._next_stage: PwpStage | None = PwpStage.ADVERTISE_KEYS
        self._handlers: Mapping[PwpStage, Callable[[object], object]] = {
            PwpStage.ADVERTISE_KEYS: self._advertise,
            PwpStage.AGREE_KEYS: self._agree,
            PwpStage.BLIND_COUNTS: self._blind,
            PwpStage.CONVERT_WEIGHTS: self._convert,
            PwpStage.BUILD_TABLES: self._build_tables,
        }
        self._pairwise_keys: Mapping[int, bytes] = MappingProxyType({})
        self._public: PaillierPublicKey | None = None
        self._leader: int | None = None
        self._seed: bytes | None = None
        self._blinds: list[mpz] = []
        self._conversion_masks: dict[int, int] = {}
        self._included: tuple[int, ...] = ()
        self._tables: Mapping[int, WindowTable] = MappingProxyType({})
        self._weights: Mapping[int, mpz] = MappingProxyType({})
        self._last_round: int | None = None
        self._corrections: tuple[tuple[int, ...] | None, Mapping[int, mpz]] = (None, MappingProxyType({}))

    @property
    def who(self) -> str:
        return f"silo {self.silo_id}"

    def setup_reply(self, stage: enum.Enum, inbound: object | None) -> object:
        """Answer one set-up stage (see the module docstring) given what the server relayed after the last."""
        _expect(stage, self._next_stage, self.who)
        reply = self._handlers[stage](inbound)
        stages = tuple(PwpStage)
        position = stages.index(stage)
        self._next_stage = stages[position + 1] if position + 1 < len(stages) else None
        return reply

    def _advertise(self, inbound: object) -> KeyAdvertisement:
        if inbound is not None:
            raise ProtocolStateError(f"{self.who}: ADVERTISE_KEYS takes no inbound message")
        return KeyAdvertisement(sender=self.silo_id, public_key=self._private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def _agree(self, inbound: object) -> SealedSeeds | KeyAgreementDone:
        _expect_type(inbound, PwpDirectory, self.who, PwpStage.AGREE_KEYS)
        if int(inbound.modulus).bit_length() != self.config.key_bits:
            raise ProtocolStateError(f"{self.who}: the server's modulus has {int(inbound.modulus).bit_length()} bits, "
                                     f"expected {self.config.key_bits}")
        if len(inbound.keys.public_keys) != self.config.num_silos:
            raise ProtocolStateError(f"{self.who}: the directory lists {len(inbound.keys.public_keys)} silos, expected {self.config.num_silos}")
        self._pairwise_keys = derive_pairwise_keys(private_key=self._private_key, directory=inbound.keys, own_id=self.silo_id)
        self._private_key = None
        self._public = PaillierPublicKey(inbound.modulus, random=self._random)
        self._leader = min(inbound.keys.public_keys)
        if self.silo_id != self._leader:
            return KeyAgreementDone(sender=self.silo_id)
        self._seed = self._random.bytes(32)
        return SealedSeeds(
            sender=self.silo_id,
            sealed={
                peer: _seed_aead(key).encrypt(bytes(12), self._seed, _seed_context(self.silo_id, peer))
                for peer, key in self._pairwise_keys.items()
            },
        )

    def _blind(self, inbound: object) -> BlindedCounts:
        _expect_type(inbound, SeedDelivery, self.who, PwpStage.BLIND_COUNTS)
        if self.silo_id != self._leader:
            if inbound.sealed is None:
                raise ProtocolStateError(f"{self.who}: no sealed seed from the lead silo {self._leader}")
            aead = _seed_aead(self._pairwise_keys[self._leader])
            self._seed = aead.decrypt(bytes(12), inbound.sealed, _seed_context(self._leader, self.silo_id))
        n = self._public.n
        self._blinds = prg_residues(self._seed, label=b"blinds", index=0, count=self.config.num_users, modulus=n)
        self._seed = None
        if any(gmpy2.gcd(r, n) != 1 for r in self._blinds):
            raise ProtocolStateError(f"{self.who}: a blind is not invertible modulo n (probability ~2^-1000)")
        values = [r * count % n for r, count in zip(self._blinds, self._counts)]
        for peer, key in self._pairwise_keys.items():
            masks = prg_residues(key, label=b"count masks", index=0, count=self.config.num_users, modulus=n)
            sign = 1 if self.silo_id < peer else -1
            values = [(value + sign * mask) % n for value, mask in zip(values, masks)]
        return BlindedCounts(sender=self.silo_id, values=tuple(int(v) for v in values))

    def _convert(self, inbound: object) -> MaskedWeights:
        _expect_type(inbound, EncryptedInverses, self.who, PwpStage.CONVERT_WEIGHTS)
        if len(inbound.ciphertexts) != self.config.num_users:
            raise ProtocolStateError(f"{self.who}: {len(inbound.ciphertexts)} encrypted inverses for {self.config.num_users} users")
        public, c_lcm = self._public, self.config.c_lcm
        mask_bits = c_lcm.bit_length() + KAPPA
        masked = []
        for user, ciphertext in enumerate(inbound.ciphertexts):
            if ciphertext is None:
                if self._counts[user]:
                    raise ProtocolStateError(f"{self.who}: the server excluded user {user}, who has records here")
                continue
            exponent = self._counts[user] * self._blinds[user] * c_lcm % public.n
            value = gmpy2.powmod(mpz(ciphertext), exponent, public.n_square) if exponent else mpz(1)
            rho = self._random.randbits(mask_bits)
            if self._counts[user]:
                self._conversion_masks[user] = rho
            masked.append(int(public.rerandomize(value * public.plaintext_factor(rho) % public.n_square)))
        self._blinds = []
        self._included = tuple(user for user, c in enumerate(inbound.ciphertexts) if c is not None)
        return MaskedWeights(sender=self.silo_id, ciphertexts=tuple(masked))

    def _build_tables(self, inbound: object) -> SetupDone:
        _expect_type(inbound, ConvertedWeights, self.who, PwpStage.BUILD_TABLES)
        if len(inbound.ciphertexts) != len(self._included):
            raise ProtocolStateError(f"{self.who}: {len(inbound.ciphertexts)} converted weights for {len(self._included)} users")
        public, config = self._public, self.config
        weights = {}
        for user, ciphertext in zip(self._included, inbound.ciphertexts):
            if user in self._conversion_masks:
                offset = self._conversion_masks.pop(user) * config.weight_scale // config.c_lcm
                weights[user] = mpz(ciphertext) * public.plaintext_factor(-offset) % public.n_square
        windows, window_bits = choose_windows(
            config.delta_bits + 1, uses=config.length, max_entries=max(16, TABLE_BUDGET // max(1, len(weights)))
        )
        self._weights = MappingProxyType(weights)
        self._tables = MappingProxyType(
            {user: WindowTable.build(w, window_bits=window_bits, windows=windows, modulus=public.n_square) for user, w in weights.items()}
        )
        return SetupDone(sender=self.silo_id)

    @property
    def weighted_users(self) -> tuple[int, ...]:
        """The users whose encrypted weights this silo holds (its users with records, after set-up)."""
        return tuple(self._weights)

    def protect(self, vector: UserDeltas, *, round_index: int, participants: tuple[int, ...]) -> PackedCiphertexts:
        """This silo's masked ciphertexts of ``sum_u w_u e_u + z`` for the round (see the module docstring).

        Raises ``ProtocolStateError`` before set-up, for a reused round, bad participants or users without a
        weight here, ``ValueError`` for deltas beyond the clipping norm and ``EncodingOverflowError`` for noise
        beyond the codec's range."""
        if self._next_stage is not None:
            raise ProtocolStateError(f"{self.who}: protect called before set-up finished")
        check_round_index(round_index)
        if self._last_round is not None and round_index <= self._last_round:
            raise ProtocolStateError(f"{self.who}: round {round_index} is not after round {self._last_round}; masks cannot be reused")
        members = check_participants(participants)
        if self.silo_id not in members:
            raise ProtocolStateError(f"{self.who} is not among the participants {participants!r}")
        if len(members) < self.config.min_participants:
            raise ProtocolStateError(f"{self.who}: a round of {len(members)} participant(s) is below the minimum of {self.config.min_participants}")
        unknown = sorted(members - self._pairwise_keys.keys() - {self.silo_id})
        if unknown:
            raise ProtocolStateError(f"{self.who}: no pairwise key with participants {unknown}")
        if not isinstance(vector, UserDeltas):
            raise ProtocolStateError(f"{self.who}: the private weighting protocol carries UserDeltas, got {type(vector).__name__}")
        users = vector.users.tolist()
        if len(set(users)) != len(users) or not set(users) <= self._tables.keys():
            raise ProtocolStateError(f"{self.who}: users {sorted(set(users) - self._tables.keys())} have no weight here (or repeat)")
        if vector.noise.size != self.config.length:
            raise ValueError(f"expected {self.config.length} values per user, got {vector.noise.size}")
        exponents = self._offset_exponents(vector.deltas)
        noise = encode_noise(vector.noise, codec=self.config.codec, extra_bits=WEIGHT_FRACTIONAL_BITS, random=self._random)
        ciphertexts = self._weighted_ciphertexts(users, exponents)
        public, layout = self._public, self.config.layout
        order = sorted(members)
        position = order.index(self.silo_id)
        for c in range(len(ciphertexts)):
            chunk = noise[c * layout.slots:(c + 1) * layout.slots]
            packed = sum(value << (k * layout.slot_bits) for k, value in enumerate(chunk))
            ciphertexts[c] = ciphertexts[c] * public.plaintext_factor(packed) % public.n_square
            if c % len(order) == position:
                ciphertexts[c] = public.rerandomize(ciphertexts[c])
        self._mask(ciphertexts, round_index=round_index, peers=[p for p in order if p != self.silo_id])
        self._last_round = round_index
        return PackedCiphertexts(
            sender=self.silo_id, round_index=round_index, length=self.config.length, ciphertexts=tuple(int(c) for c in ciphertexts)
        )

    def _offset_exponents(self, deltas: np.ndarray) -> np.ndarray:
        """``e + 2^b`` with ``e = trunc(Delta 2^f)`` (shared codec; never lengthens a clipped delta): all in ``[1, 2^(b+1))``.

        Refuses a delta whose L2 norm exceeds the clipping norm C (up to float rounding of the clipping, 2^-40
        relative): the sensitivity, and the exponent tables' range, rest on it."""
        norms = np.linalg.norm(deltas, axis=1) if deltas.size else np.zeros(0)
        limit = self.config.max_abs_delta * (1 + 2.0**-40)
        if norms.size and float(norms.max()) > limit:
            raise ValueError(f"a user delta has L2 norm {float(norms.max()):.6g}, beyond the clipping norm {self.config.max_abs_delta}")
        return self.config.codec.to_integers(deltas, toward_zero=True) + (1 << self.config.delta_bits)

    def _weighted_ciphertexts(self, users: list[int], exponents: np.ndarray) -> list[mpz]:
        """Per ciphertext, ``Enc(sum_k sum_u w_u e_{u,j_k} 2^(k L))``: table look-ups per slot, Horner over slots,
        then the offsets ``2^b sum_u w_u`` removed by one precomputed ciphertext per slot count."""
        public, layout, length = self._public, self.config.layout, self.config.length
        modulus, shift = public.n_square, mpz(1) << layout.slot_bits
        count = layout.ciphertexts(length)
        if not users:
            return [mpz(1)] * count
        pairs = []
        for user, row in zip(users, exponents):
            table = self._tables[user]
            mask = (1 << table.window_bits) - 1
            for window, powers in enumerate(table.rows):
                pairs.append((powers, ((row >> (window * table.window_bits)) & mask).tolist()))
        ciphertexts = []
        for c in range(count):
            accumulator = None
            for j in range(min(length, (c + 1) * layout.slots) - 1, c * layout.slots - 1, -1):
                slot = mpz(1)
                for powers, digits in pairs:
                    digit = digits[j]
                    if digit:
                        slot = slot * powers[digit] % modulus
                accumulator = slot if accumulator is None else gmpy2.powmod(accumulator, shift, modulus) * slot % modulus
            ciphertexts.append(accumulator)
        inverses = self._offset_corrections(users)
        return [ct * inverses[min(layout.slots, length - c * layout.slots)] % modulus for c, ct in enumerate(ciphertexts)]

    def _offset_corrections(self, users: list[int]) -> Mapping[int, mpz]:
        """By number of slots m: ``Enc(2^b sum_u w_u sum_{k<m} 2^(k L))^-1``, which removes the exponents' offset
        from a ciphertext of m slots. Kept for the last set of users (every round when all users take part)."""
        key = tuple(users)
        if self._corrections[0] == key:
            return self._corrections[1]
        layout, length, modulus = self.config.layout, self.config.length, self._public.n_square
        offset = mpz(1)
        for user in users:
            offset = offset * self._weights[user] % modulus
        offset = gmpy2.powmod(offset, mpz(1) << self.config.delta_bits, modulus)
        corrections, running = {}, None
        sizes = {min(layout.slots, length - c * layout.slots) for c in range(layout.ciphertexts(length))}
        for slots in range(1, max(sizes) + 1):
            running = offset if running is None else gmpy2.powmod(running, mpz(1) << layout.slot_bits, modulus) * offset % modulus
            if slots in sizes:
                corrections[slots] = running
        inverses = MappingProxyType(dict(zip(corrections, batch_invert(list(corrections.values()), modulus))))
        self._corrections = (key, inverses)
        return inverses

    def _mask(self, ciphertexts: list[mpz], *, round_index: int, peers: list[int]) -> None:
        """Multiply by ``prod_{peer > s} R - prod_{peer < s} R^-1`` (R pseudorandom in ``Z_{n^2}^*`` per pair, round
        and ciphertext), in place; the masks cancel in the product over all participants."""
        modulus = self._public.n_square
        divisors = [mpz(1)] * len(ciphertexts)
        for peer in peers:
            masks = prg_residues(self._pairwise_keys[peer], label=b"round masks", index=round_index, count=len(ciphertexts), modulus=modulus)
            for c, mask in enumerate(masks):
                if self.silo_id < peer:
                    ciphertexts[c] = ciphertexts[c] * mask % modulus
                else:
                    divisors[c] = divisors[c] * mask % modulus
        if any(peer < self.silo_id for peer in peers):
            for c, inverse in enumerate(batch_invert(divisors, modulus)):
                ciphertexts[c] = ciphertexts[c] * inverse % modulus


class PwpServer(ServerProtocol):
    """Server side: holds the Paillier key pair (generated at ``ADVERTISE_KEYS`` unless given), relays the set-up,
    and combines a round into the float64 weighted sum. It only ever sees public keys, sealed seeds, masked
    residues and ciphertexts whose plaintexts are masked."""

    setup_stages: ClassVar[tuple[enum.Enum, ...]] = tuple(PwpStage)

    def __init__(self, *, config: PwpConfig, key: PaillierKeyPair | None = None, random: CryptoRandom | None = None) -> None:
        if key is not None and key.public.bits != config.key_bits:
            raise ValueError(f"the key has {key.public.bits} bits, the configuration says {config.key_bits}")
        self.config = config
        self._key = key
        self._random = random or CryptoRandom()
        self._next_stage: PwpStage | None = PwpStage.ADVERTISE_KEYS
        self._silos: tuple[int, ...] = ()
        self._handlers: Mapping[PwpStage, Callable[[Mapping[int, object]], Mapping[int, object]]] = {
            PwpStage.ADVERTISE_KEYS: self._relay_keys,
            PwpStage.AGREE_KEYS: self._relay_seed,
            PwpStage.BLIND_COUNTS: self._relay_inverses,
            PwpStage.CONVERT_WEIGHTS: self._relay_conversion,
            PwpStage.BUILD_TABLES: self._check_done,
        }
        self.excluded_users: tuple[int, ...] = ()

    def relay(self, stage: enum.Enum, inbound: Mapping[int, object]) -> Mapping[int, object]:
        """Take every silo's reply to ``stage`` and return the message for each silo (see the module docstring)."""
        _expect(stage, self._next_stage, "server")
        if stage is not PwpStage.ADVERTISE_KEYS and set(inbound) != set(self._silos):
            raise ProtocolStateError(f"server: {stage.name} replies from {sorted(inbound)}, expected {list(self._silos)}")
        outbound = self._handlers[stage](inbound)
        stages = tuple(PwpStage)
        position = stages.index(stage)
        self._next_stage = stages[position + 1] if position + 1 < len(stages) else None
        return outbound

    def _relay_keys(self, inbound: Mapping[int, object]) -> Mapping[int, object]:
        directory = build_key_directory(inbound)
        if len(directory.public_keys) != self.config.num_silos:
            raise ProtocolStateError(f"server: {len(directory.public_keys)} silos advertised keys, expected {self.config.num_silos}")
        if self._key is None:
            self._key = PaillierKeyPair.generate(self.config.key_bits, random=self._random)
        self._silos = tuple(sorted(directory.public_keys))
        message = PwpDirectory(modulus=int(self._key.public.n), keys=directory)
        return {silo: message for silo in self._silos}

    def _relay_seed(self, inbound: Mapping[int, object]) -> Mapping[int, object]:
        leader = self._silos[0]
        seeds = inbound[leader]
        if not isinstance(seeds, SealedSeeds) or seeds.sender != leader or set(seeds.sealed) != set(self._silos[1:]):
            raise ProtocolStateError(f"server: the lead silo {leader} must seal the seed for every other silo, sent {seeds!r}")
        for silo in self._silos[1:]:
            if inbound[silo] != KeyAgreementDone(sender=silo):
                raise ProtocolStateError(f"server: silo {silo} answered AGREE_KEYS with {inbound[silo]!r}")
        return {silo: SeedDelivery(sealed=seeds.sealed.get(silo)) for silo in self._silos}

    def _relay_inverses(self, inbound: Mapping[int, object]) -> Mapping[int, object]:
        n, users = self._key.public.n, self.config.num_users
        totals = [mpz(0)] * users
        for silo, counts in inbound.items():
            if not isinstance(counts, BlindedCounts) or counts.sender != silo or len(counts.values) != users:
                raise ProtocolStateError(f"server: silo {silo} sent {type(counts).__name__} instead of {users} blinded counts")
            totals = [(total + value) % n for total, value in zip(totals, counts.values)]
        self.excluded_users = tuple(user for user, total in enumerate(totals) if total == 0)
        inverses = []
        for total in totals:
            if total == 0:
                inverses.append(None)
                continue
            try:
                inverses.append(int(self._key.encrypt(gmpy2.invert(total, n))))
            except ZeroDivisionError:
                raise ProtocolStateError("server: a blinded total shares a factor with n") from None
        message = EncryptedInverses(ciphertexts=tuple(inverses))
        return {silo: message for silo in self._silos}

    def _relay_conversion(self, inbound: Mapping[int, object]) -> Mapping[int, object]:
        config = self.config
        included = config.num_users - len(self.excluded_users)
        bound = (1 << (config.c_lcm.bit_length() + KAPPA)) + config.c_lcm
        outbound = {}
        for silo, masked in inbound.items():
            if not isinstance(masked, MaskedWeights) or masked.sender != silo or len(masked.ciphertexts) != included:
                raise ProtocolStateError(f"server: silo {silo} sent {type(masked).__name__} instead of {included} masked weights")
            converted = []
            for ciphertext in masked.ciphertexts:
                value = self._key.decrypt(ciphertext)
                if value >= bound:
                    raise ProtocolStateError(
                        f"server: a masked weight from silo {silo} is beyond C_LCM + mask: some user has more than "
                        f"max_records_per_user = {config.max_records_per_user} records (or a silo deviated)"
                    )
                converted.append(int(self._key.encrypt(value * config.weight_scale // config.c_lcm)))
            outbound[silo] = ConvertedWeights(ciphertexts=tuple(converted))
        return outbound

    def _check_done(self, inbound: Mapping[int, object]) -> Mapping[int, object]:
        for silo, reply in inbound.items():
            if reply != SetupDone(sender=silo):
                raise ProtocolStateError(f"server: silo {silo} answered BUILD_TABLES with {reply!r}")
        return {}

    def combine(self, messages: Mapping[int, object], *, round_index: int, participants: tuple[int, ...]) -> np.ndarray:
        """Multiply the participants' ciphertexts (the masks cancel), decrypt, unpack the signed slots and return
        the float64 weighted sum. Raises ``EncodingOverflowError`` if a slot is beyond what honest encodings
        reach (some encoding was out of range)."""
        config, layout = self.config, self.config.layout
        if self._next_stage is not None:
            raise ProtocolStateError("server: combine called before set-up finished")
        if len(check_participants(participants)) < config.min_participants:
            raise ProtocolStateError(f"server: a round of {len(participants)} participant(s) is below the minimum of {config.min_participants}")
        unknown = sorted(set(participants) - set(self._silos))
        if unknown:
            raise ProtocolStateError(f"server: participants {unknown} took no part in the set-up")
        collected = collect_round_messages(messages, message_type=PackedCiphertexts, round_index=round_index, participants=participants)
        count = layout.ciphertexts(config.length)
        for message in collected:
            if message.length != config.length or len(message.ciphertexts) != count:
                raise ProtocolStateError(f"round {round_index}: silo {message.sender} sent {len(message.ciphertexts)} ciphertexts "
                                         f"of {message.length} values; expected {count} of {config.length}")
        modulus, n = self._key.public.n_square, int(self._key.public.n)
        values: list[int] = []
        for c in range(count):
            product = mpz(1)
            for message in collected:
                product = product * message.ciphertexts[c] % modulus
            plaintext = self._key.decrypt(product)
            values.extend(self._unpack(plaintext - n if plaintext > n // 2 else plaintext, min(layout.slots, config.length - c * layout.slots)))
        denominator = 1 << config.grid_bits
        return np.array([value / denominator for value in values], dtype=np.float64)

    def _unpack(self, packed: int, slots: int) -> list[int]:
        """The signed slots of a packed plaintext (balanced base ``2^L``), checked against ``slot_bound``."""
        layout, bound = self.config.layout, self.config.slot_bound()
        width, half = 1 << layout.slot_bits, 1 << (layout.slot_bits - 1)
        values = []
        for _ in range(slots):
            value = packed & (width - 1)
            if value >= half:
                value -= width
            values.append(value)
            packed = (packed - value) >> layout.slot_bits
        largest = max(abs(v) for v in values)
        if packed != 0 or largest > bound:
            raise EncodingOverflowError(
                f"a decrypted slot reaches {math.ldexp(largest, -self.config.grid_bits):.6g} (or overflowed its slot), beyond "
                f"the {math.ldexp(bound, -self.config.grid_bits):.6g} honest encodings reach: some encoding was out of range",
                math.ldexp(largest, -self.config.grid_bits),
                math.ldexp(bound, -self.config.grid_bits),
            )
        return values
