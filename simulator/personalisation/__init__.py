"""Personalised federations (several hypotheses, each client using the one that fits it, as in IFCA): the
experimenter's per-client evaluation and its run outputs. Sweeps of such runs report
through :mod:`privsilo.simulator.experiments.personalised_report`."""
