"""Personalised federations (several hypotheses, each client using the one that fits it, as in IFCA): the
experimenter's per-client evaluation, its run outputs and a grid runner with its table and plots."""
