"""Experiments built from runs: grid sweeps (:mod:`~simulator.experiments.sweep`, resumable through
:mod:`~simulator.experiments.journal`, pooled by :mod:`~simulator.experiments.merge`), their tables and plots
(:mod:`~simulator.experiments.plots`, rPDP-FL's :mod:`~simulator.experiments.rpdp_plots`) and, for sweeps of
personalised runs such as d-privacy's, :mod:`~simulator.experiments.personalised_report`. The core run loop stays in ``simulator``."""
