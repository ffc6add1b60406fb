"""Experiments built from runs: grid sweeps (:mod:`~privsilo.simulator.experiments.sweep`, resumable through
:mod:`~privsilo.simulator.experiments.journal`, pooled by :mod:`~privsilo.simulator.experiments.merge`), their tables and plots
(:mod:`~privsilo.simulator.experiments.plots`; a mechanism's own, such as rPDP-FL's, live with the mechanism) and, for sweeps of
personalised runs such as d-privacy's, :mod:`~privsilo.simulator.experiments.personalised_report`. The core run loop stays in ``simulator``."""
