"""Run-level pairwise key agreement (Bonawitz et al., CCS 2017, round 1 ``KA.agree``, run once at set-up): the
private-weighting protocol (``privsilo.protocols.private_weighting``) builds its set-up stages on it. Secure aggregation
itself agrees fresh keys every round (see the package docstring for why)."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from privsilo.protocols.base import ProtocolStateError, ReadOnlyMappings
from privsilo.protocols.secure_aggregation.limits import check_silo_id
from privsilo.protocols.secure_aggregation.masks import derive_pairwise_key


@dataclass(frozen=True)
class KeyAdvertisement:
    """A silo's run-level X25519 public key (32 raw bytes)."""

    sender: int
    public_key: bytes


@dataclass(frozen=True)
class KeyDirectory(ReadOnlyMappings):
    """Every silo's run-level public key, relayed by the server to every silo (read-only)."""

    public_keys: Mapping[int, bytes]


@dataclass(frozen=True)
class KeyAgreementDone:
    """A silo's acknowledgement that it derived its pairwise keys."""

    sender: int


def derive_pairwise_keys(
    *, private_key: X25519PrivateKey, directory: KeyDirectory, own_id: int
) -> Mapping[int, bytes]:
    """Every pairwise key of silo ``own_id`` (see [`derive_pairwise_key`][privsilo.protocols.secure_aggregation.derive_pairwise_key]), by peer id, read-only.

    Raises ``ProtocolStateError`` if the directory does not hold this silo's own public key (a relay error).
    """
    own_public = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    if directory.public_keys.get(own_id) != own_public:
        raise ProtocolStateError(f"silo {own_id}: the key directory does not hold this silo's public key")
    return MappingProxyType(
        {
            peer_id: derive_pairwise_key(private_key=private_key, peer_public_key=peer_key, own_id=own_id, peer_id=peer_id)
            for peer_id, peer_key in directory.public_keys.items()
            if peer_id != own_id
        }
    )


def build_key_directory(inbound: Mapping[int, object]) -> KeyDirectory:
    """The server's ``KeyDirectory`` from every silo's ``KeyAdvertisement`` (checked: each silo advertised its
    own valid X25519 key, no two silos the same one, at least one silo)."""
    for silo_id, advertisement in inbound.items():
        if not isinstance(advertisement, KeyAdvertisement) or advertisement.sender != silo_id:
            raise ProtocolStateError(f"server: silo {silo_id} did not advertise its own key: {advertisement!r}")
        check_silo_id(silo_id)
        try:
            X25519PublicKey.from_public_bytes(advertisement.public_key)
        except (TypeError, ValueError) as error:
            raise ProtocolStateError(f"server: silo {silo_id} advertised an invalid X25519 key") from error
    public_keys = {silo_id: advertisement.public_key for silo_id, advertisement in inbound.items()}
    if len(set(public_keys.values())) != len(public_keys):
        raise ProtocolStateError("server: two silos advertised the same public key")
    if not public_keys:
        raise ProtocolStateError("server: no silo advertised a key")
    return KeyDirectory(public_keys=public_keys)
