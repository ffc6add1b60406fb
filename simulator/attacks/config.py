"""What the attacks assume about the mechanisms, known without torch (``privsilo validate`` reads it).

A mechanism is attackable when a silo's upload is ``[weight x delta, weight]`` (:func:`mechanisms.fedavg.
weighted_delta_vector`) with ``delta`` the model change of the silo's local SGD steps from the broadcast model:
FedAvg (``none``), and ``dp_sgd`` and ``rpdp``, whose steps also clip each record's gradient to the public
``max_grad_norm`` and add noise. ULDP's upload sums per-user clipped deltas with per-user weights, a local
computation the attack does not model, so it is refused. A new mechanism with such an upload adds its name here.
"""
from __future__ import annotations

ATTACKABLE_MECHANISMS: tuple[str, ...] = ("none", "dp_sgd", "rpdp")
CLIPPING_MECHANISMS: tuple[str, ...] = ("dp_sgd", "rpdp")  # per-record clipping to mechanism.max_grad_norm
