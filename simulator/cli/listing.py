"""``privsilo list``: the mechanisms, datasets, models, partitions and protocols on offer, or the scenario keys
under a prefix (neither torch, Ray nor matplotlib loads)."""
from __future__ import annotations

import argparse


def cmd_list(args: argparse.Namespace) -> int:
    if args.prefix is not None:
        from privsilo.simulator.scenario.reference import keys_text

        print(keys_text(args.prefix))
        return 0
    from privsilo.mechanisms.registry import MECHANISM_NAMES
    from privsilo.mechanisms.server_optimizers import SERVER_OPTIMIZERS
    from privsilo.simulator.data import DATASETS
    from privsilo.simulator.data.partition import PARTITIONS
    from privsilo.simulator.models.builtin import MODELS
    from privsilo.simulator.user_code import GROUPS, registered

    print("mechanisms: " + ", ".join(MECHANISM_NAMES))
    print("datasets:")
    for name, info in sorted(DATASETS.items()):
        print(f"  {name:15s} {info.description}")
    for name, entry in sorted(registered("dataset").items()):
        print(f"  {name:15s} {entry.value} (registered under {GROUPS['dataset']})")
    print("models: " + ", ".join(MODELS))
    for name, entry in sorted(registered("model").items()):
        print(f"  {name:15s} {entry.value} (registered under {GROUPS['model']})")
    print("partitions: " + ", ".join(PARTITIONS))
    print("protocols: plain sum (default), secure_aggregation (protocol.secure_aggregation: true; dropout recovery; "
          "protocol.neighbours: auto (the default where safe) | all | K for SecAgg+)")
    print("server optimizers: " + ", ".join(SERVER_OPTIMIZERS) + " (federation.server_optimizer: NAME or {name: NAME, ...}; "
          "FedProx: federation.proximal_mu)")
    print("attacks: dlg, idlg (privsilo attack; the scenario's attack: block)")
    print("audits: canaries of a record, user or client (privsilo audit; the scenario's audit: block)")
    print("faults: crashes at listed rounds and points, or silo_failure_rate (the scenario's faults: block); "
          "checkpoints for --resume (checkpoint.every)")
    return 0
