"""What the attacks assume about the mechanisms, known without torch (``privsilo validate`` reads it).

A mechanism is attackable when a silo's upload reveals the model change of its local SGD steps from what the
server broadcast, in one of two forms:

* ``weighted_delta``: ``[weight x delta, weight]`` (:func:`mechanisms.fedavg.weighted_delta_vector`): FedAvg
  (``none``), and ``dp_sgd`` and ``rpdp``, whose steps also clip each record's gradient to the public
  ``max_grad_norm`` and add noise.
* ``parameters``: the trained parameters of one of the k broadcast hypotheses, ``theta_j + delta' + noise``:
  d-privacy (Galli et al., "Group Privacy for Personalized Federated Learning", ICISSP 2023, Algorithm 2), whose
  ``delta'`` is ``delta`` clipped to the public ``mechanism.radius`` (``calibration: clipped``; ``paper`` does not
  clip) and whose silo trains ``mechanism.local_epochs`` epochs when that is set.

ULDP's upload sums per-user clipped deltas with per-user weights, a local computation the attack does not model,
so it is refused. PLDP's upload has the weighted-delta form, but the silo first clamps every coordinate to its
safe range (not modelled here) and PDPM then replaces it by one of three values about the range's length L apart
whatever the budget (Shen et al., Entropy 2023), so it is refused too. A new mechanism with one of these uploads
adds its name to :data:`UPLOAD_FORMS`.
"""
from __future__ import annotations

WEIGHTED_DELTA = "weighted_delta"
PARAMETERS = "parameters"
UPLOAD_FORMS: dict[str, str] = {"none": WEIGHTED_DELTA, "dp_sgd": WEIGHTED_DELTA, "rpdp": WEIGHTED_DELTA, "dprivacy": PARAMETERS}
ATTACKABLE_MECHANISMS: tuple[str, ...] = tuple(UPLOAD_FORMS)
CLIPPING_MECHANISMS: tuple[str, ...] = ("dp_sgd", "rpdp")  # per-record clipping to mechanism.max_grad_norm
UPDATE_CLIPPING_MECHANISMS: tuple[str, ...] = ("dprivacy",)  # the whole delta clipped to mechanism.radius (if set)
EPOCH_MECHANISMS: tuple[str, ...] = ("dprivacy",)  # mechanism.local_epochs passes over the records, when set
