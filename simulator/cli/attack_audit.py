"""``privsilo attack`` and ``privsilo audit``: a scenario's gradient-inversion attack (its ``attack:`` block) and
its canary audit (its ``audit:`` block), each into an output directory of its own kind."""
from __future__ import annotations

import argparse

from privsilo.simulator.cli.output import output_dir
from privsilo.simulator.cli.pool import ray_address
from privsilo.simulator.run_dir.ownership import RUNS_ROOT


def cmd_attack(args: argparse.Namespace) -> int:
    from privsilo.simulator.scenario import resolve_scenario, with_attack_block

    scenario = with_attack_block(resolve_scenario(args.scenario, args.overrides))  # bad input fails before torch loads
    from privsilo.simulator.attacks.targets import check_targets_fit
    from privsilo.simulator.data.sources import scenario_dataset

    check_targets_fit(scenario, scenario_dataset(scenario.data, seed=scenario.seed))
    from privsilo.simulator.attacks.runner import attack

    address = ray_address(args, configured=scenario.ray.address)
    with output_dir(args, default_parent=RUNS_ROOT / f"{scenario.name}_attack", kind="attack") as out:
        report = attack(scenario, out_dir=out, address=address, progress=not args.no_progress)
    print(report.headline())
    print(f"results written to {out}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from privsilo.simulator.audit.runner import audit, with_audit_block
    from privsilo.simulator.scenario import resolve_scenario

    scenario = with_audit_block(resolve_scenario(args.scenario, args.overrides))  # bad input fails before torch loads
    from privsilo.simulator.run_dir.invocation import invocation

    address = ray_address(args, configured=scenario.ray.address)
    with output_dir(args, default_parent=RUNS_ROOT / f"{scenario.name}_audit", kind="audit") as out:
        report = audit(scenario, out_dir=out, address=address, progress=not args.no_progress,
                       invocation=invocation(args.argv, args.overrides))
    print(report.headline())
    print(f"results written to {out}")
    return 0
