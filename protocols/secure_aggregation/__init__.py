"""Secure aggregation that survives dropouts: double masking with Shamir-shared seeds (Bonawitz et al.,
"Practical Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017, Fig. 4; with ``server="may_lie"``
its signed keys and consistency round) on a sparse random graph (SecAgg+: Bell et al., "Secure Single-Server
Aggregation with (Poly)Logarithmic Overhead", CCS 2020).

Every round ``r`` with sampled participants ``P`` is a fresh protocol instance (``privsilo.protocols.base`` gives the
engine's loop). With ``server="may_lie"`` a set-up registers every silo's Ed25519 identity key
(``signatures.py``). Per round:

0. ``begin_round`` (server): the degree ``K`` (or the complete graph) and threshold ``t`` for ``|P|`` out of the
   federation (``parameters.py``).
1. ``COMMIT_KEYS`` (``may_lie`` only): silo ``u`` draws its round secrets (step 2) and sends a signed hash of its
   public keys; the server sends every committer the one list of commitments (``CommitmentList``).
2. ``ADVERTISE_KEYS`` (Bonawitz round 0): silo ``u`` draws from the OS CSPRNG a 16-byte mask seed ``s_u``
   (its X25519 mask key ``sk_u = HKDF(s_u)``), a 16-byte self-mask seed ``b_u`` and an X25519 channel key
   ``c_u``, and sends both public keys (``may_lie``: after checking the commitment list, signed with its hash).
   The server refuses invalid or low-order keys (that silo sits the round out; ``may_lie``: the round ends,
   naming it), draws the graph ``H(n, K)`` under a relabelling seeded by the hash of the list and every key
   (``graph.py``), and sends each silo its neighbours' keys (``NeighbourKeys``; ``may_lie``: with the roster,
   every entry of which the silo checks against the registry and the commitments, and recomputes the graph).
3. ``SHARE_KEYS`` (round 1): ``u`` Shamir-splits ``s_u`` and ``b_u`` (threshold ``t``) among its share set,
   itself and those neighbours, and sends each neighbour its two shares AES-GCM-encrypted under their channel
   key (``sharing.py``; ``may_lie``: with the list of holders, checked against the graph with the share's index).
   The server relays each ciphertext to its addressee only (``ShareBundle``).
4. ``COLLECT_SHARES``: ``u`` decrypts and keeps the shares of the neighbours that shared (``U2``).
5. ``protect`` (round 2): ``y_u = encode(x_u) + PRG(b_u) + sum_v s_uv PRG(k_uv)`` mod 2^64 over those
   neighbours ``v``, ``s_uv = +1`` if ``u < v`` else ``-1``, ``k_uv = HKDF(X25519(sk_u, pk_v))``, PRG the
   AES-256-CTR keystream (``masks.py``).
6. ``may_lie`` only, the consistency exchanges (round 3): ``unmask_requests`` sends every uploader the claimed
   uploaders ``U``; each signs it if a truthful server could claim it and it names no neighbour whose shares the
   silo did not receive (``U3 ⊆ U2``); ``unmask_follow_up`` sends the signatures, whose signers ``U'`` each silo
   signs in turn (a non-signer counts as dropped), then the signatures of ``U'``; a silo reveals nothing unless,
   for every silo whose share it holds, ``t`` of that silo's holders signed the same ``U'``.
7. ``unmask_requests``/``unmask_follow_up`` / ``unmask_reply`` / ``combine`` (round 4): each uploader reveals its
   shares of ``b_v`` for the members of its share set that uploaded (``may_lie``: that are in ``U'``) and of
   ``s_v`` for the others. The server recovers each summed silo's ``b`` and each other sharer's ``s``, checking
   surplus shares against the polynomial (a wrong share is outvoted or the round is abandoned naming the
   holders), subtracts ``PRG(b_u)`` and the pairwise masks between summed and other silos, and decodes.
   A silo that uploaded and then dropped stays in the sum (``may_lie``: if it signed ``U``); fewer than ``t``
   shares of a needed seed raise ``RoundAbandoned``, as does any step after which some silo keeps fewer than
   ``t`` share holders.

Never both shares. A silo refuses any request that would make it reveal, in one round, both kinds of share of
one silo (or a share of its own mask seed). A server that tells different holders different stories defeats
that per-silo check whenever ``t < s`` (``s`` the share set): ``honest_but_curious`` gives no protection against
a server that lies. The consistency exchanges with ``t > s / 2`` (enforced with ``may_lie``) leave room for one
story only.

Why keys are fresh every round. With run-level keys, recovering ``s_v`` after ``v`` dropped in round ``r``
would give the server ``v``'s pairwise masks for every round; as soon as ``v`` uploads again in a later round
and its self-mask is revealed as usual, the server could strip all masks from that upload and read ``x_v``.
Per-round keys make a recovered seed useless beyond its round, and a silo that crashed simply joins the next
round's instance. Between rounds, silo and server objects hold only bytes and plain data (they pickle).

Threat model: see ``parameters.py`` (exactly which events the bounds cover, for a coalition of at most
``ceil(gamma N)`` silos of the federation) and docs/threat-model.md.

``run_keys.py`` keeps the run-level key agreement that the private-weighting protocol builds its set-up on.

Minimum participants and range: both sides take ``min_participants`` (>= 2) and share a ``FixedPointCodec``
built for sums of up to the federation's size; a silo refuses to mask for a smaller round or to unmask when
fewer uploaded, and the server abandons such a round before asking for any share.
"""
from privsilo.protocols.secure_aggregation.graph import harary_degree, public_permutation, round_graph
from privsilo.protocols.secure_aggregation.masks import PAIRWISE_KEY_LABEL, derive_pairwise_key, mask_stream, self_mask_key
from privsilo.protocols.secure_aggregation.messages import (
    CommitmentList,
    ConfirmedUploaders,
    ConsistencyRequest,
    ConsistencySignature,
    EncryptedShares,
    IdentityKey,
    IdentityRegistry,
    KeyCommitment,
    MaskedVector,
    NeighbourKeys,
    RoundKeyAdvertisement,
    RoundRoster,
    SecAggSetupStage,
    SecAggStage,
    ShareBundle,
    SignedUploaders,
    UnmaskReply,
    UnmaskRequest,
)
from privsilo.protocols.secure_aggregation.parameters import (
    CORRECTNESS_PARAMETER,
    DEFAULT_CORRUPT_FRACTION,
    DEFAULT_DROPOUT_RATE,
    SECURITY_PARAMETER,
    SERVER_ASSUMPTIONS,
    SERVER_MODELS,
    GraphSettings,
    RoundParameters,
    auto_parameters,
    default_neighbours,
    excess_dropouts,
    excess_warning,
    failure_bounds,
    parameter_report,
    round_parameters,
    run_report,
)
from privsilo.protocols.secure_aggregation.run_keys import (
    KeyAdvertisement,
    KeyAgreementDone,
    KeyDirectory,
    build_key_directory,
    derive_pairwise_keys,
)
from privsilo.protocols.secure_aggregation.server import SecAggServer
from privsilo.protocols.secure_aggregation.silo import SecAggSilo

__all__ = [
    "CORRECTNESS_PARAMETER",
    "CommitmentList",
    "ConfirmedUploaders",
    "KeyCommitment",
    "SERVER_ASSUMPTIONS",
    "SERVER_MODELS",
    "ConsistencyRequest",
    "ConsistencySignature",
    "IdentityKey",
    "IdentityRegistry",
    "RoundRoster",
    "SecAggSetupStage",
    "SignedUploaders",
    "excess_dropouts",
    "excess_warning",
    "run_report",
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
    "default_neighbours",
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
