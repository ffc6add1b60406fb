"""What lets silos hold out against a server that may lie (Bonawitz et al., CCS 2017, Sec. 6 and Fig. 4's
actively secure variant): long-term Ed25519 identity keys registered at set-up, signed key advertisements, and the
consistency round's signed statement of who uploaded.

* Registration: every silo draws an Ed25519 key and registers its public half once (the ``REGISTER`` set-up
  stage). As in Bonawitz et al., the registry is assumed authentic (a PKI): the server relays it at set-up and
  may lie only from the first round on.
* Key advertisements: a silo signs ``(round, its id, mask key, channel key)``, so a server cannot hand its
  neighbours keys of its own.
* Consistency: after the uploads, the server tells each uploader the set ``U`` of silos it claims uploaded; the
  silo signs ``(round, U)`` and, before revealing any share of a silo ``w``, checks that ``threshold`` of ``w``'s
  share holders signed the same ``U`` (``silo.py``). An honest silo signs one set per round.

Signatures are checked through ``verified``, which remembers its answers within a process: a worker hosting
many silos checks each signature once, however many of its silos see it.
"""
from __future__ import annotations

import hashlib
import struct
from functools import lru_cache
from typing import Iterable, Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from protocols.secure_aggregation.messages import RoundRoster

ADVERTISEMENT_LABEL = b"privsilo secagg signed round keys v1"
UPLOADERS_LABEL = b"privsilo secagg consistency: uploaders v1"
GRAPH_SEED_LABEL = b"privsilo secagg graph seed from the round's keys v1"
IDENTITY_KEY_BYTES = 32


def identity_key(secret: bytes) -> Ed25519PrivateKey:
    """A silo's long-term signing key from 32 random bytes."""
    return Ed25519PrivateKey.from_private_bytes(secret)


def identity_public(secret: bytes) -> bytes:
    return identity_key(secret).public_key().public_bytes_raw()


def advertisement_message(round_index: int, sender: int, mask_public_key: bytes, channel_public_key: bytes) -> bytes:
    """What a silo signs when it advertises its round keys."""
    return ADVERTISEMENT_LABEL + round_index.to_bytes(12, "big") + sender.to_bytes(8, "big") + mask_public_key + channel_public_key


def uploaders_message(round_index: int, uploaders: Iterable[int]) -> bytes:
    """What a silo signs in the consistency round: the round and the sorted set of silos claimed to have uploaded."""
    ids = sorted(set(uploaders))
    return UPLOADERS_LABEL + round_index.to_bytes(12, "big") + len(ids).to_bytes(8, "big") + struct.pack(f">{len(ids)}Q", *ids)


def sign(secret: bytes, message: bytes) -> bytes:
    return identity_key(secret).sign(message)


@lru_cache(maxsize=65536)
def verified(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s Ed25519 signature of ``message`` (remembered per process)."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def graph_seed(round_index: int, keys: Mapping[int, tuple[bytes, ...]]) -> int:
    """The seed of round ``round_index``'s graph relabelling: SHA-256 of every advertised key pair (the first two
    entries of ``keys[id]``: mask and channel key; a signature after them is left out), by silo id.

    It exists only once every advertiser has drawn its fresh keys of the round, so nobody (the server included)
    knows a round's graph before its keys are fixed; a coalition chosen before then cannot have been chosen for
    the graph."""
    digest = hashlib.sha256(GRAPH_SEED_LABEL + round_index.to_bytes(12, "big"))
    digest.update(b"".join(silo_id.to_bytes(8, "big") + b"".join(keys[silo_id][:2]) for silo_id in sorted(keys)))
    return int.from_bytes(digest.digest(), "big")


_last_roster: list = [None, 0]  # [the last roster object, its seed]


def roster_seed(roster: RoundRoster) -> int:
    """``graph_seed`` of a ``RoundRoster``'s advertised keys, remembered for the last roster object seen: the
    silos of one worker receive one (unpickled) roster, and each would otherwise hash every key of the round."""
    if _last_roster[0] is not roster:
        _last_roster[:] = [roster, graph_seed(roster.round_index, roster.advertised)]
    return _last_roster[1]
