"""Personalised federations (several hypotheses, each client using the one that fits it, as in IFCA): the
experimenter's per-client evaluation and its run outputs. Grids of such runs are in
:mod:`simulator.experiments.dprivacy_grid`."""
