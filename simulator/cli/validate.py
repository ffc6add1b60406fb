"""``privsilo validate``: check a scenario or grid file, and that its data is here, without running it (neither
torch, Ray nor matplotlib loads)."""
from __future__ import annotations

import argparse


def cmd_validate(args: argparse.Namespace) -> int:
    """Check the file, load its data, and check every attack block's target silos against their records."""
    from privsilo.simulator.attacks.targets import check_targets_fit
    from privsilo.simulator.data.sources import scenario_dataset
    from privsilo.simulator.scenario import load_scenario_file, resolve_scenario

    if "axes" in load_scenario_file(args.scenario):  # a grid file: check every combination x seed
        from privsilo.simulator.experiments.sweep import count, load_grid

        grid = load_grid(args.scenario, overrides=args.overrides)
        scenarios = [grid.scenario(labels, seed) for labels in grid.combinations() for seed in grid.seeds]
        loaded = {}
        for scenario in scenarios:
            key = (scenario.data.dataset, scenario.data.path, scenario.data.silos, scenario.seed)
            if key not in loaded:
                loaded[key] = scenario_dataset(scenario.data, seed=scenario.seed)
            check_targets_fit(scenario, loaded[key])
        combinations = len(scenarios) // len(grid.seeds)
        print(f"{args.scenario}: valid grid ({count(len(scenarios), 'run')}: {count(combinations, 'combination')} x {count(len(grid.seeds), 'seed')})")
        return 0
    scenario = resolve_scenario(args.scenario, args.overrides)
    check_targets_fit(scenario, scenario_dataset(scenario.data, seed=scenario.seed))
    print(f"{args.scenario}: valid ({scenario.mechanism.name} on {scenario.data.dataset}, {scenario.data.silos} silos, {scenario.federation.rounds} rounds)")
    return 0
