"""Gradient-inversion attacks by an honest-but-curious server: DLG and iDLG on what the server receives.

``privsilo.simulator.attacks.runner.attack(scenario, ...)`` is the Python form of ``privsilo attack``; the pieces are
:mod:`~privsilo.simulator.attacks.capture` (the attacked round: observations for the attack, ground truth for the report),
:mod:`~privsilo.simulator.attacks.inversion` (DLG, iDLG), :mod:`~privsilo.simulator.attacks.metrics` and
:mod:`~privsilo.simulator.attacks.outputs`. Importing this package loads nothing heavy. What an attack assumes of a
mechanism (its upload's form, the clipping and epochs it replays) is the mechanism's traits (`privsilo.mechanisms.base`):
FedAvg's ``[weight x delta, weight]`` (``none``, and ``dp_sgd`` and ``rpdp``, which clip each record's gradient to
the public ``max_grad_norm`` and add noise) or d-privacy's trained parameters (``theta_j + delta' + noise``, the
update clipped to the public ``radius`` under ``calibration: clipped``). ULDP's per-user weighted sums and PLDP's
PDPM outputs are not modelled, so they are refused.
"""
