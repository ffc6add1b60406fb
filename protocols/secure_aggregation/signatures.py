"""What lets silos hold out against a server that may lie (Bonawitz et al., CCS 2017, Sec. 6 and Fig. 4's
actively secure variant): long-term Ed25519 identity keys registered at set-up, signed key advertisements, and the
consistency round's signed statement of who uploaded.

* Registration: every silo draws an Ed25519 key and registers its public half once (the ``REGISTER`` set-up
  stage). As in Bonawitz et al., the registry is assumed authentic (a PKI): the server relays it at set-up and
  may lie only from the first round on.
* Commitments: a silo first signs the hash of its round keys (``key_digest``); the server sends every silo the
  list of commitments, whose hash (``list_digest``) each silo signs with its keys. The graph seed hashes the list
  and every key it commits to (``graph_seed``): fixed only once keys the server could not see when it fixed the
  list are revealed, and a committed silo that reveals nothing (or a key that does not match) ends the round, so
  the server cannot grind the graph by choosing whose keys count.
* Key advertisements: a silo signs ``(round, its id, mask key, channel key, list hash)``, so a server cannot
  hand its neighbours keys of its own, nor show two silos different lists (hence different graphs) and have them
  accept each other's keys.
* Consistency: after the uploads, the server tells each uploader the set ``U`` of silos it claims uploaded; the
  silo signs ``(round, graph seed, U)``; then the set ``U'`` of those that signed, with their signatures; the
  silo signs ``U'`` and, before revealing any share of a silo ``w``, checks that ``threshold`` of ``w``'s share
  holders signed the same ``U'`` (``silo.py``). An honest silo signs one set of each kind per round.

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

from privsilo.protocols.secure_aggregation.messages import RoundRoster

ADVERTISEMENT_LABEL = b"privsilo secagg signed round keys v2"
COMMITMENT_LABEL = b"privsilo secagg commitment to round keys v1"
LIST_LABEL = b"privsilo secagg commitment list v1"
UPLOADERS_LABEL = b"privsilo secagg consistency: uploaders v2"
SIGNERS_LABEL = b"privsilo secagg consistency: uploaders that signed v1"
GRAPH_SEED_LABEL = b"privsilo secagg graph seed from the round's keys v1"
IDENTITY_KEY_BYTES = 32


def identity_key(secret: bytes) -> Ed25519PrivateKey:
    """A silo's long-term signing key from 32 random bytes."""
    return Ed25519PrivateKey.from_private_bytes(secret)


def identity_public(secret: bytes) -> bytes:
    return identity_key(secret).public_key().public_bytes_raw()


def advertisement_message(round_index: int, sender: int, mask_public_key: bytes, channel_public_key: bytes,
                          listed: bytes = b"") -> bytes:
    """What a silo signs when it advertises its round keys: them, and the hash of the commitment list it saw."""
    return (ADVERTISEMENT_LABEL + round_index.to_bytes(12, "big") + sender.to_bytes(8, "big") + mask_public_key
            + channel_public_key + listed)


def key_digest(round_index: int, sender: int, mask_public_key: bytes, channel_public_key: bytes) -> bytes:
    """The commitment to a silo's round keys: SHA-256 of them with the round and the silo's id."""
    return hashlib.sha256(advertisement_message(round_index, sender, mask_public_key, channel_public_key)).digest()


def commitment_message(round_index: int, sender: int, digest: bytes) -> bytes:
    """What a silo signs when it commits to its round keys."""
    return COMMITMENT_LABEL + round_index.to_bytes(12, "big") + sender.to_bytes(8, "big") + digest


def list_digest(round_index: int, participants: Iterable[int], commitments: Mapping[int, tuple[bytes, bytes]]) -> bytes:
    """SHA-256 of a commitment list: the round, its sampled silos and every ``(id, digest)``."""
    digest = hashlib.sha256(LIST_LABEL + round_index.to_bytes(12, "big"))
    ids = sorted(participants)
    digest.update(len(ids).to_bytes(8, "big") + struct.pack(f">{len(ids)}Q", *ids))
    digest.update(b"".join(i.to_bytes(8, "big") + commitments[i][0] for i in sorted(commitments)))
    return digest.digest()


def uploaders_message(round_index: int, uploaders: Iterable[int], *, seed: int = 0, signers: bool = False) -> bytes:
    """What a silo signs in the consistency round: the round, the graph seed (so that every signer of one set
    used one graph) and the sorted set of silos claimed to have uploaded (``signers``: the set of those that
    signed that claim)."""
    ids = sorted(set(uploaders))
    return ((SIGNERS_LABEL if signers else UPLOADERS_LABEL) + round_index.to_bytes(12, "big") + seed.to_bytes(32, "big")
            + len(ids).to_bytes(8, "big") + struct.pack(f">{len(ids)}Q", *ids))


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


def graph_seed(round_index: int, keys: Mapping[int, tuple[bytes, ...]], listed: bytes = b"") -> int:
    """The seed of round ``round_index``'s graph relabelling: SHA-256 of the commitment list's hash (``listed``;
    empty when the server follows the protocol) and every advertised key pair (the first two entries of
    ``keys[id]``: mask and channel key; a signature after them is left out), by silo id.

    It exists only once every advertiser has drawn its fresh keys of the round, so nobody (the server included)
    knows a round's graph before its keys are fixed; a coalition chosen before then cannot have been chosen for
    the graph. When the server may lie, the keys were committed to before any was seen, and all of them count."""
    digest = hashlib.sha256(GRAPH_SEED_LABEL + round_index.to_bytes(12, "big") + listed)
    digest.update(b"".join(silo_id.to_bytes(8, "big") + b"".join(keys[silo_id][:2]) for silo_id in sorted(keys)))
    return int.from_bytes(digest.digest(), "big")


_last_roster: list = [None, 0, b""]  # [the last roster object, its seed, the list hash]


def roster_seed(roster: RoundRoster, listed: bytes) -> int:
    """``graph_seed`` of a ``RoundRoster``'s advertised keys and the list hash ``listed``, remembered for the last
    roster object seen: the silos of one worker receive one (unpickled) roster, and each would otherwise hash
    every key of the round."""
    if _last_roster[0] is not roster or _last_roster[2] != listed:
        _last_roster[:] = [roster, graph_seed(roster.round_index, roster.advertised, listed), listed]
    return _last_roster[1]


_last_signers: list = [None, b"", frozenset()]  # [the last signatures mapping, its message, the valid signers]


def valid_signers(registry: Mapping[int, bytes], message: bytes, signatures: Mapping[int, bytes]) -> frozenset[int]:
    """The ids in ``signatures`` whose signature of ``message`` verifies under their registered key, remembered for
    the last mapping object seen (the silos of one worker receive one copy of every signature of the round)."""
    if _last_signers[0] is not signatures or _last_signers[1] != message:
        valid = frozenset(i for i, signature in signatures.items() if verified(registry.get(i, b""), message, signature))
        _last_signers[:] = [signatures, message, valid]
    return _last_signers[2]
