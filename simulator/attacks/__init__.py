"""Gradient-inversion attacks by an honest-but-curious server: DLG and iDLG on what the server receives.

``simulator.attacks.runner.attack(scenario, ...)`` is the Python form of ``privsilo attack``; the pieces are
:mod:`~simulator.attacks.capture` (the attacked round: observations for the attack, ground truth for the report),
:mod:`~simulator.attacks.inversion` (DLG, iDLG), :mod:`~simulator.attacks.metrics` and
:mod:`~simulator.attacks.outputs`. Importing this package loads nothing heavy (``privsilo validate`` reads
:mod:`~simulator.attacks.config`).
"""
