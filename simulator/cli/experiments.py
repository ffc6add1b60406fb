"""``privsilo sweep`` (a grid of scenarios x seeds, resumable from its journal) and ``privsilo merge`` (the runs
of several sweeps in one table)."""
from __future__ import annotations

import argparse

from privsilo.simulator.cli.pool import ray_address
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.ownership import claim


def cmd_sweep(args: argparse.Namespace) -> int:
    from privsilo.simulator.experiments.sweep import load_grid, sweep
    from privsilo.simulator.run_dir.tracking import check_trackers

    check_trackers(args.log)
    if args.out is not None:  # an unfinished sweep in --out (its journal beside it) resumes
        claim(args.out, kind="sweep", overwrite=args.overwrite)
    seeds = _seed_option(args.seeds)
    configured = (load_grid(args.grid, overrides=args.overrides).base.get("ray") or {}).get("address")  # bad input fails here
    result = sweep(args.grid, out_dir=args.out, seeds=seeds, overrides=args.overrides, only=args.only,
                   address=ray_address(args, configured=configured), progress=not args.no_progress, log=args.log)
    print(result.headline())
    print((result.out_dir / "table.md").read_text(), end="")
    print(f"results written to {result.out_dir}")
    return 0


def _seed_option(text: str | None) -> int | list[int] | None:
    """``--seeds``: a count N (seeds 0..N-1) or a comma-separated list of seeds (``2,`` lists seed 2 alone)."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()] if "," in text else int(text)
    except ValueError:
        raise ScenarioError("--seeds", text, "a seed count N (seeds 0..N-1) or a comma-separated list such as 1,2 (one listed seed: 2,)") from None


def cmd_merge(args: argparse.Namespace) -> int:
    from privsilo.simulator.experiments.merge import merge_sweeps

    claim(args.out, kind="merge", overwrite=args.overwrite)
    _, runs, table = merge_sweeps(args.sweeps, out_dir=args.out)
    print(f"merged {len(runs)} runs of {len(args.sweeps)} sweeps ({len(table)} combinations)")
    print((args.out / "table.md").read_text(), end="")
    print(f"results written to {args.out}")
    return 0
