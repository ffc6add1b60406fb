"""Secure aggregation that survives dropouts: double masking with Shamir-shared seeds (Bonawitz et al.,
"Practical Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017, Fig. 4, the honest-but-curious
protocol without the consistency-check round) on a sparse random graph (SecAgg+: Bell et al., "Secure
Single-Server Aggregation with (Poly)Logarithmic Overhead", CCS 2020).

Every round ``r`` with sampled participants ``P`` is a fresh protocol instance (``protocols.base`` gives the
engine's loop); there are no setup stages:

0. ``begin_round`` (server): the graph, ``H(n, K)`` under a public random relabelling of ``P`` (``graph.py``),
   or the complete graph; the threshold ``t`` (``parameters.py``).
1. ``ADVERTISE_KEYS`` (Bonawitz round 0): silo ``u`` draws from the OS CSPRNG a 16-byte mask seed ``s_u``
   (its X25519 mask key ``sk_u = HKDF(s_u)``), a 16-byte self-mask seed ``b_u`` and an X25519 channel key
   ``c_u``, and sends both public keys. The server sends each silo the keys of its neighbours that advertised
   (``NeighbourKeys``: its neighbour list, ``t`` and ``n``).
2. ``SHARE_KEYS`` (round 1): ``u`` Shamir-splits ``s_u`` and ``b_u`` (threshold ``t``) among its share set,
   itself and those neighbours, and sends each neighbour its two shares AES-GCM-encrypted under their channel
   key (``sharing.py``). The server relays each ciphertext to its addressee only (``ShareBundle``).
3. ``COLLECT_SHARES``: ``u`` decrypts and keeps the shares of the neighbours that shared (``U2``).
4. ``protect`` (round 2): ``y_u = encode(x_u) + PRG(b_u) + sum_v s_uv PRG(k_uv)`` mod 2^64 over those
   neighbours ``v``, ``s_uv = +1`` if ``u < v`` else ``-1``, ``k_uv = HKDF(X25519(sk_u, pk_v))``, PRG the
   ChaCha20 keystream (``masks.py``).
5. ``unmask_requests`` / ``unmask_reply`` / ``combine`` (round 4): the uploaders ``U3`` are asked which of
   their share set uploaded; each reveals its shares of ``b_v`` for those and of ``s_v`` for the others. The
   server recovers each uploader's ``b`` and each non-uploading sharer's ``s`` from exactly ``t`` shares,
   subtracts ``PRG(b_u)`` and the pairwise masks between uploaders and non-uploaders, and decodes. A silo that
   uploaded and then dropped (it never answers) stays in the sum; fewer than ``t`` shares of a needed seed
   raise ``RoundAbandoned``, as does any step after which some silo keeps fewer than ``t`` share holders.

Never both shares. The server asks for ``b_v``'s shares only of uploaders and ``s_v``'s only of the others,
and a silo refuses any request that would make it reveal, in one round, both kinds of share of one silo (or a
share of its own mask seed): otherwise the server could remove all of ``v``'s masks from ``y_v``.

Why keys are fresh every round. With run-level keys, recovering ``s_v`` after ``v`` dropped in round ``r``
would give the server ``v``'s pairwise masks for every round; as soon as ``v`` uploads again in a later round
and its self-mask is revealed as usual, the server could strip all masks from that upload and read ``x_v``.
Per-round keys make a recovered seed useless beyond its round, and a silo that crashed simply joins the next
round's instance. Between rounds, silo and server objects hold only bytes and plain data (they pickle).

Threat model: an honest-but-curious server, possibly colluding with honest-but-curious silos; silos may drop
at any step. The server alone learns only the sum of the uploaders' vectors (as long as the uploaders that
did not collude stay connected in the graph). A coalition of the server with ``c`` silos learns nothing more
about an honest silo unless at least ``t`` of its share set collude (then it can recover both seeds), or the
graph restricted to honest uploaders falls apart (then it learns the sums of the parts); ``parameters.py``
bounds both events for ``neighbours="auto"``. Public keys are not authenticated and there is no consistency
check round, so a malicious server is out of scope.

``run_keys.py`` keeps the run-level key agreement that the private-weighting protocol builds its set-up on.

Minimum participants and range: both sides take ``min_participants`` (>= 2) and share a ``FixedPointCodec``
built for sums of up to the federation's size; a silo refuses to mask for a smaller round or to unmask when
fewer uploaded, and the server abandons such a round before asking for any share.
"""
from protocols.secure_aggregation.graph import harary_degree, public_permutation, round_graph
from protocols.secure_aggregation.masks import PAIRWISE_KEY_LABEL, derive_pairwise_key, mask_stream, self_mask_key
from protocols.secure_aggregation.messages import (
    EncryptedShares,
    RoundKeyAdvertisement,
    MaskedVector,
    NeighbourKeys,
    SecAggStage,
    ShareBundle,
    UnmaskReply,
    UnmaskRequest,
)
from protocols.secure_aggregation.parameters import (
    CORRECTNESS_PARAMETER,
    DEFAULT_CORRUPT_FRACTION,
    DEFAULT_DROPOUT_RATE,
    SECURITY_PARAMETER,
    GraphSettings,
    RoundParameters,
    auto_parameters,
    failure_bounds,
    parameter_report,
    round_parameters,
)
from protocols.secure_aggregation.run_keys import (
    KeyAdvertisement,
    KeyAgreementDone,
    KeyDirectory,
    build_key_directory,
    derive_pairwise_keys,
)
from protocols.secure_aggregation.server import SecAggServer
from protocols.secure_aggregation.silo import SecAggSilo

__all__ = [
    "CORRECTNESS_PARAMETER",
    "DEFAULT_CORRUPT_FRACTION",
    "DEFAULT_DROPOUT_RATE",
    "PAIRWISE_KEY_LABEL",
    "SECURITY_PARAMETER",
    "EncryptedShares",
    "GraphSettings",
    "KeyAdvertisement",
    "KeyAgreementDone",
    "KeyDirectory",
    "MaskedVector",
    "NeighbourKeys",
    "RoundKeyAdvertisement",
    "RoundParameters",
    "SecAggServer",
    "SecAggSilo",
    "SecAggStage",
    "ShareBundle",
    "UnmaskReply",
    "UnmaskRequest",
    "auto_parameters",
    "build_key_directory",
    "derive_pairwise_key",
    "derive_pairwise_keys",
    "failure_bounds",
    "harary_degree",
    "mask_stream",
    "parameter_report",
    "public_permutation",
    "round_graph",
    "self_mask_key",
]
