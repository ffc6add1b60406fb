"""Silo side of the private weighting protocol (see ``privsilo.protocols.private_weighting`` for the protocol)."""
from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Callable, Mapping

import gmpy2
import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from gmpy2 import mpz

from privsilo.protocols.base import ProtocolStateError, SiloProtocol, check_participants, check_round_index
from privsilo.protocols.crypto_random import CryptoRandom
from privsilo.protocols.paillier import PaillierPublicKey, batch_invert
from privsilo.protocols.private_weighting.protocol import (
    TABLE_BUDGET,
    PwpConfig,
    PwpStage,
    encode_noise,
    expect_stage,
    expect_type,
    next_stage,
    prg_residues,
    seed_aead,
    seed_context,
)
from privsilo.protocols.private_weighting.layout import KAPPA, WEIGHT_FRACTIONAL_BITS
from privsilo.protocols.private_weighting.tables import TablePlan, WeightPowers, plan_tables
from privsilo.protocols.private_weighting.messages import (
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
from privsilo.protocols.secure_aggregation import KeyAdvertisement, KeyAgreementDone, derive_pairwise_keys


class PwpSilo(SiloProtocol):
    """Silo side: ``counts[u]`` is ``n_{s,u}`` for every user u (this silo's own histogram only). A count above
    ``max_records_per_user`` is caught by the server at the weight conversion (no silo can check the totals).
    ``planned_rounds`` sizes the set-up's tables (more rounds justify bigger tables; results do not depend on it)."""

    def __init__(
        self,
        silo_id: int,
        *,
        config: PwpConfig,
        counts: np.ndarray,
        random: CryptoRandom | None = None,
        private_key: X25519PrivateKey | None = None,
        planned_rounds: int = 1,
    ) -> None:
        counts = np.asarray(counts)
        if counts.shape != (config.num_users,) or counts.min(initial=0) < 0:
            raise ValueError(f"counts must hold {config.num_users} non-negative record counts, got shape {counts.shape}")
        if isinstance(planned_rounds, bool) or not isinstance(planned_rounds, int) or planned_rounds < 1:
            raise ValueError(f"planned_rounds must be an int >= 1, got {planned_rounds!r}")
        self.silo_id = silo_id
        self.config = config
        self.planned_rounds = planned_rounds
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
        self._powers: WeightPowers | None = None
        self._last_round: int | None = None

    @property
    def who(self) -> str:
        return f"silo {self.silo_id}"

    def setup_reply(self, stage: enum.Enum, inbound: object | None) -> object:
        """Answer one set-up stage (see the module docstring) given what the server relayed after the last."""
        expect_stage(stage, self._next_stage, self.who)
        reply = self._handlers[stage](inbound)
        self._next_stage = next_stage(stage)
        return reply

    def _advertise(self, inbound: object) -> KeyAdvertisement:
        if inbound is not None:
            raise ProtocolStateError(f"{self.who}: ADVERTISE_KEYS takes no inbound message")
        return KeyAdvertisement(sender=self.silo_id, public_key=self._private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def _agree(self, inbound: object) -> SealedSeeds | KeyAgreementDone:
        expect_type(inbound, PwpDirectory, self.who, PwpStage.AGREE_KEYS)
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
                peer: seed_aead(key).encrypt(bytes(12), self._seed, seed_context(self.silo_id, peer))
                for peer, key in self._pairwise_keys.items()
            },
        )

    def _blind(self, inbound: object) -> BlindedCounts:
        expect_type(inbound, SeedDelivery, self.who, PwpStage.BLIND_COUNTS)
        if self.silo_id != self._leader:
            if inbound.sealed is None:
                raise ProtocolStateError(f"{self.who}: no sealed seed from the lead silo {self._leader}")
            aead = seed_aead(self._pairwise_keys[self._leader])
            self._seed = aead.decrypt(bytes(12), inbound.sealed, seed_context(self._leader, self.silo_id))
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
        expect_type(inbound, EncryptedInverses, self.who, PwpStage.CONVERT_WEIGHTS)
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
        expect_type(inbound, ConvertedWeights, self.who, PwpStage.BUILD_TABLES)
        if len(inbound.ciphertexts) != len(self._included):
            raise ProtocolStateError(f"{self.who}: {len(inbound.ciphertexts)} converted weights for {len(self._included)} users")
        public, config = self._public, self.config
        weights = {}
        for user, ciphertext in zip(self._included, inbound.ciphertexts):
            if user in self._conversion_masks:
                offset = self._conversion_masks.pop(user) * config.weight_scale // config.c_lcm
                weights[user] = mpz(ciphertext) * public.plaintext_factor(-offset) % public.n_square
        plan = plan_tables(users=len(weights), exponent_bits=config.delta_bits, length=config.length, layout=config.layout,
                           rounds=self.planned_rounds, budget=TABLE_BUDGET)
        self._powers = WeightPowers(weights, plan=plan, layout=config.layout, modulus=public.n_square)
        return SetupDone(sender=self.silo_id)

    @property
    def table_plan(self) -> TablePlan | None:
        """The tables set-up built for this silo's users (None before set-up)."""
        return self._powers.plan if self._powers else None

    @property
    def weighted_users(self) -> tuple[int, ...]:
        """The users whose encrypted weights this silo holds (its users with records, after set-up)."""
        return tuple(sorted(self._powers.users)) if self._powers else ()

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
        if len(set(users)) != len(users) or not set(users) <= self._powers.users:
            raise ProtocolStateError(f"{self.who}: users {sorted(set(users) - self._powers.users)} have no weight here (or repeat)")
        if vector.noise.size != self.config.length:
            raise ValueError(f"expected {self.config.length} values per user, got {vector.noise.size}")
        exponents = self._exponents(vector.deltas)
        noise = encode_noise(vector.noise, codec=self.config.codec, extra_bits=WEIGHT_FRACTIONAL_BITS, random=self._random)
        ciphertexts = self._powers.packed(users, exponents, self.config.length)
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

    def _exponents(self, deltas: np.ndarray) -> np.ndarray:
        """``e = trunc(Delta 2^f)`` (shared codec; never lengthens a clipped delta), ``|e| < 2^b``.

        Refuses a delta whose L2 norm exceeds the clipping norm C (up to float rounding of the clipping, 2^-40
        relative): the sensitivity, and the exponent tables' range, rest on it."""
        norms = np.linalg.norm(deltas, axis=1) if deltas.size else np.zeros(0)
        limit = self.config.max_abs_delta * (1 + 2.0**-40)
        if norms.size and float(norms.max()) > limit:
            raise ValueError(f"a user delta has L2 norm {float(norms.max()):.6g}, beyond the clipping norm {self.config.max_abs_delta}")
        return self.config.codec.to_integers(deltas, toward_zero=True)

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
