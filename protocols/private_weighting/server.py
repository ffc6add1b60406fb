"""Server side of the private weighting protocol (see ``privsilo.protocols.private_weighting`` for the protocol)."""
from __future__ import annotations

import enum
import math
from typing import Callable, ClassVar, Mapping

import gmpy2
import numpy as np
from gmpy2 import mpz

from privsilo.protocols.base import ProtocolStateError, ServerProtocol, check_participants, collect_round_messages
from privsilo.protocols.crypto_random import CryptoRandom
from privsilo.protocols.fixed_point import EncodingOverflowError
from privsilo.protocols.paillier import PaillierKeyPair
from privsilo.protocols.private_weighting.protocol import PwpConfig, PwpStage, expect_stage, next_stage
from privsilo.protocols.private_weighting.layout import KAPPA
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
)
from privsilo.protocols.secure_aggregation import KeyAgreementDone, build_key_directory


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
        expect_stage(stage, self._next_stage, "server")
        if stage is not PwpStage.ADVERTISE_KEYS and set(inbound) != set(self._silos):
            raise ProtocolStateError(f"server: {stage.name} replies from {sorted(inbound)}, expected {list(self._silos)}")
        outbound = self._handlers[stage](inbound)
        self._next_stage = next_stage(stage)
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

    def combine(
        self,
        messages: Mapping[int, object],
        *,
        round_index: int,
        participants: tuple[int, ...],
        unmasking: Mapping[int, object] | None = None,
    ) -> np.ndarray:
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
            values.extend(self._unpack(plaintext - n if plaintext > n // 2 else plaintext, layout.slots_in(c, config.length)))
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
