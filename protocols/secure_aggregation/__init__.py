"""Secure aggregation by pairwise masking (Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017), without dropout recovery.

Protocol. Setup runs once over the server, which only relays:

1. ``SecAggStage.ADVERTISE_KEYS``: every silo ``i`` draws an X25519 key pair and sends its public key
   (``KeyAdvertisement``); the server answers every silo with the ``KeyDirectory`` of all public keys.
2. ``SecAggStage.AGREE_KEYS``: every silo derives with every other silo ``j`` the 32-byte pairwise key
   ``k_ij = HKDF-SHA256(X25519(sk_i, pk_j), info = label || min(i, j) || max(i, j))`` (Bonawitz et al.,
   round 1 with ``KA.agree``), so ``k_ij == k_ji``, and acknowledges with ``KeyAgreementDone``.

Each round ``r`` with participants ``P`` then runs the paper's masked-input and unmasking steps:

3. masked input (``SecAggSilo.protect``): silo ``i`` sends ``y_i = encode(x_i) + sum_{j in P, j != i}
   s_ij * PRG(k_ij, r)  mod 2^64`` with ``s_ij = +1`` if ``i < j`` else ``-1`` (``MaskedVector``). The PRG is
   the ChaCha20 keystream under ``k_ij`` with a nonce made from ``r``, read as little-endian uint64 words.
4. unmasking (``SecAggServer.combine``): the server adds the ``y_i`` modulo 2^64; every pairwise mask appears
   once with each sign and cancels, leaving ``sum_i encode(x_i)``, which it decodes (``FixedPointCodec``).

Minimum participants. A sum of one vector is that vector, and a sum of few reveals correspondingly much, so
both sides take ``min_participants`` (at least 2, the default): a silo refuses to mask for a smaller round,
and the server refuses to combine one. The simulator's server skips such rounds before anyone trains.

Range. Both sides share a ``FixedPointCodec`` built for sums of up to the federation's number of silos; it
reserves headroom bits, so a sum of in-range encodings never wraps and an out-of-range one (a silo that skipped
the codec's check) is caught when the server decodes (``EncodingOverflowError``).

Threat model: an honest-but-curious server and honest-but-curious silos that follow the protocol; no silo
drops out between sampling and upload. Each ``y_i`` is uniformly distributed modulo 2^64 to anyone who does
not know a pairwise key of ``i`` (ChaCha20 being a PRF), so the server, which holds only public keys and
masked vectors, learns nothing beyond the sum. A coalition of the server with silos learns at most the sum of
the other participants' vectors (with ``P`` minus one colluding silos, the last one's vector).

Limits of this simulator: the server samples the participants of a round *before* training and tells every
participant the list, and all of them must upload. The paper's double masking and Shamir sharing of mask
seeds, which let the server recover from dropouts, are left out, as is any authentication of public keys
(a malicious server could substitute keys; out of scope for honest-but-curious). A silo refuses to mask
two vectors in the same round, since masks are a function of ``(k_ij, r)`` and reuse would reveal the
difference of the two vectors.
"""
from protocols.secure_aggregation.masks import (
    PAIRWISE_KEY_LABEL,
    build_key_directory,
    derive_pairwise_key,
    derive_pairwise_keys,
    mask_stream,
)
from protocols.secure_aggregation.messages import (
    KeyAdvertisement,
    KeyAgreementDone,
    KeyDirectory,
    MaskedVector,
    SecAggStage,
)
from protocols.secure_aggregation.server import SecAggServer
from protocols.secure_aggregation.silo import SecAggSilo

__all__ = [
    "PAIRWISE_KEY_LABEL",
    "KeyAdvertisement",
    "KeyAgreementDone",
    "KeyDirectory",
    "MaskedVector",
    "SecAggServer",
    "SecAggSilo",
    "SecAggStage",
    "build_key_directory",
    "derive_pairwise_key",
    "derive_pairwise_keys",
    "mask_stream",
]
