"""Prove that two versions of privsilo behave the same: run every shipped scenario on each side and compare.

For each file under ``scenarios/`` it runs the matching command (``run``; ``attack`` under ``attacks/``;
``audit`` under ``audits/``; ``sweep`` for a grid, on a small slice of it or skipped with the reason) with the
same arguments on both sides, shortened by the overrides in ``PLAN``, and compares what a user relies on:

- ``metrics.csv``, ``runs.csv``, ``table.csv``, ``curves.csv`` without wall-time columns;
- ``model.pt``: the same tensors under the same names, bit for bit;
- ``summary.json``, ``attack.json``, ``audit.json`` without times, paths, versions, the Ray address and the argv;
- every epsilon / privacy line the command printed, and its exit status.

It uses only each side's ``privsilo`` command (``CHECKOUT/.venv/bin/privsilo``, run in ``CHECKOUT``), so the
import names inside may differ (``simulator.`` before, ``privsilo.simulator.`` after); checkpoints, pickles and
plots are not compared. Each side runs in a warm pool of its own (``privsilo pool start``, stopped at the end).

    same_outputs.py BEFORE_CHECKOUT AFTER_CHECKOUT      # run both sides and compare
    same_outputs.py CHECKOUT --save DIR                 # run one side and keep its outputs in DIR
    same_outputs.py CHECKOUT --against DIR              # run one side with DIR's arguments and compare

Prints one line per scenario (same / DIFFERS: what / skipped: why) and exits 1 if any differs.
One side (30 commands, 5 grids skipped) took 38 min on the shared 2-core machine at load 40-58, most of it
starting actors and importing torch under that load; each command's time is in ``DIR/<scenario>/result.json``.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = ["--set", "federation.rounds=2"]
STEPS = ["--set", "federation.local_steps=2"]
SHORT_ATTACK = ["--set", "attack.iterations=10", "--set", "attack.target_silo=[0]"]
ONE_SEED = ["--seeds", "1"]
MNIST_GRIDS = "the same axes as its heart-disease twin (run here); the mechanism on MNIST is covered by the scenario run"

# Per scenario (path under scenarios/, without .yaml): extra arguments that shorten it, chosen so that every round
# still goes through the mechanism's noise and accounting (two rounds where the accountant composes), or a
# reason to skip it. Scenarios missing here run with ROUNDS (grids: one seed and the first label of each axis).
PLAN: dict[str, list[str] | str] = {
    "quickstart": ROUNDS + STEPS,
    "quickstart_secagg": ROUNDS + STEPS,
    "heart_disease_dpsgd": ROUNDS + STEPS,
    "mnist_dpsgd": ROUNDS + STEPS,
    "dp_fedavg/central": ROUNDS + STEPS + ["--set", "data.silos=20"],
    "dp_fedavg/adaptive": ROUNDS + STEPS + ["--set", "data.silos=20"],
    "dp_fedavg/distributed": ROUNDS + STEPS + ["--set", "data.silos=20"],
    "dprivacy/rotated_mnist": ROUNDS,
    "dprivacy/synthetic_linear": ROUNDS,
    "pldp/mnist": ROUNDS + STEPS + ["--set", "data.silos=10"],
    "pldp/fashion_mnist": ROUNDS + STEPS + ["--set", "data.silos=10"],
    "rpdp/heart_disease_three_levels": ROUNDS + STEPS,
    "rpdp/mnist_iid": ROUNDS + STEPS,
    "rpdp/mnist_noniid": ROUNDS + STEPS,
    "uldp/heart_disease": ROUNDS + STEPS,
    "uldp/mnist": ROUNDS + STEPS,
    "uldp/mnist_naive": ROUNDS + STEPS,
    "attacks/mnist_dlg": SHORT_ATTACK,
    "attacks/lfw_dlg": SHORT_ATTACK,
    "attacks/mnist_defences": SHORT_ATTACK + ["--set", "federation.rounds=1"],
    "attacks/mnist_defences_grid": ONE_SEED + SHORT_ATTACK + ["--set", "federation.rounds=1", "--only", "defence=dp_sgd_1e-1"],
    "audits/dp_fedavg_digits": ROUNDS + STEPS + ["--set", "audit.canaries=50"],
    "audits/dp_sgd_digits": ROUNDS + ["--set", "audit.canaries=50"],
    "audits/uldp_digits": ROUNDS + ["--set", "audit.canaries=50"],
    "dprivacy/rotated_mnist_grid": ONE_SEED + ROUNDS + ["--only", "mechanism.hypotheses=k2", "--only", "mechanism.nu=nu1"],
    "dprivacy/synthetic_linear_grid": ONE_SEED + ROUNDS + ["--only", "mechanism.hypotheses=k1", "--only", "mechanism.nu=nu15"],
    "pldp/fashion_mnist_grid": ONE_SEED + ROUNDS + STEPS + ["--set", "data.silos=10", "--only", "mechanism.ranges=tau1",
                                                            "--only", "mechanism.budgets=eps3", "--only", "mechanism.perturb=update"],
    "pldp/mnist_grid": "the same axes and mechanism as pldp/fashion_mnist_grid (run here); pldp on MNIST is covered by pldp/mnist",
    "rpdp/heart_disease_grid": ONE_SEED + ROUNDS + STEPS + ["--only", "mechanism.budgets=BoundedMixGauss"],
    "rpdp/mnist_iid_grid": MNIST_GRIDS,
    "rpdp/mnist_noniid_grid": MNIST_GRIDS,
    "uldp/heart_disease_grid": ONE_SEED + ROUNDS + STEPS + ["--only", "data.users.count=U200", "--only", "variant=NAIVE,GROUP-median,SGD"],
    "uldp/heart_disease_sampling_grid": ONE_SEED + ROUNDS + STEPS + ["--only", "mechanism.user_rate=q0.5", "--only", "mechanism.variant=AVG"],
    "uldp/mnist_grid": MNIST_GRIDS,
    "uldp/mnist_sampling_grid": MNIST_GRIDS,
}

COMPARED = {"metrics.csv", "runs.csv", "table.csv", "curves.csv", "model.pt", "summary.json", "attack.json", "audit.json"}
UNSTABLE_KEYS = {"timing", "invocation", "address", "node_id", "privsilo_version", "version", "argv", "pid", "hostname"}
UNSTABLE_KEY_PARTS = ("seconds", "time", "path")
PRIVACY_LINE = re.compile(r"epsilon|privacy|delta|\bmu\b|ε|δ", re.IGNORECASE)
POOL_NOTE = "privsilo: using the local warm pool"
COMMAND_TIMEOUT_S = 1800


def scenario_keys(checkout: Path) -> list[str]:
    root = checkout / "scenarios"
    return sorted(str(path.relative_to(root).with_suffix("")) for path in root.rglob("*.yaml"))


def plan_for(checkout: Path, only: list[str]) -> list[dict]:
    """One entry per shipped scenario of ``checkout``: its command and arguments, or why it is skipped."""
    entries = []
    for key in scenario_keys(checkout):
        if only and not any(part in key for part in only):
            continue
        scenario = f"scenarios/{key}.yaml"
        extra = PLAN.get(key)
        if isinstance(extra, str):
            entries.append({"key": key, "skip": extra})
            continue
        grid = _is_grid(checkout / scenario)
        command = "sweep" if grid else "attack" if key.startswith("attacks/") else "audit" if key.startswith("audits/") else "run"
        if extra is None:
            extra = ROUNDS + (ONE_SEED + _first_labels(checkout / scenario) if grid else [])
        entries.append({"key": key, "command": command, "scenario": scenario, "args": list(extra)})
    return entries


def _is_grid(path: Path) -> bool:
    return re.search(r"^axes:", path.read_text(), re.MULTILINE) is not None


def _first_labels(path: Path) -> list[str]:
    import yaml

    axes = yaml.safe_load(path.read_text())["axes"]
    return [arg for axis, labels in axes.items() for arg in ("--only", f"{axis}={next(iter(labels))}")]


def run_side(checkout: Path, plan: list[dict], dest: Path, *, pool: bool) -> float:
    """Run every planned command of ``checkout`` into ``dest/<key>/`` (the compared files, stdout, stderr,
    exit status); return the wall time in seconds."""
    privsilo = checkout / ".venv" / "bin" / "privsilo"
    if not privsilo.exists():
        raise SystemExit(f"same_outputs: {privsilo} does not exist (make the checkout's venv first)")
    dest.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    state = tempfile.mkdtemp(prefix="same_outputs-", dir=os.environ.get("PRIVSILO_STATE_DIR"))
    env = {**os.environ, "PRIVSILO_STATE_DIR": state, "RAY_AUTH_MODE": "disabled"}
    started = time.monotonic()
    try:
        if pool:
            subprocess.run([str(privsilo), "pool", "start", "--idle-timeout", "900"], cwd=checkout, env=env, check=True,
                           stdout=subprocess.DEVNULL)
        for entry in plan:
            if "skip" not in entry:
                _run_one(privsilo, checkout, entry, dest / entry["key"], env)
    finally:
        if pool:
            subprocess.run([str(privsilo), "pool", "stop"], cwd=checkout, env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(state, ignore_errors=True)
    seconds = time.monotonic() - started
    (dest / "manifest.json").write_text(json.dumps({"checkout": str(checkout), "commit": commit, "plan": plan,
                                                    "seconds": round(seconds, 1)}, indent=1))
    return seconds


def _run_one(privsilo: Path, checkout: Path, entry: dict, where: Path, env: dict) -> None:
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    out = where / "out"
    argv = [str(privsilo), entry["command"], entry["scenario"], "--out", str(out), "--no-progress", *entry["args"]]
    started = time.monotonic()
    if not (checkout / entry["scenario"]).exists():
        rc, stdout, stderr = None, "", f"{entry['scenario']} is not in {checkout}"
    else:
        try:
            done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            rc, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    seconds = time.monotonic() - started
    (where / "stdout.txt").write_text(stdout.replace(str(out), "<OUT>"))
    (where / "stderr.txt").write_text(stderr)
    (where / "result.json").write_text(json.dumps({"rc": rc, "seconds": round(seconds, 1), "argv": argv[1:]}))
    _keep_compared(out)
    print(f"  ran {entry['key']} ({entry['command']}, exit {rc}, {seconds:.0f} s)", file=sys.stderr, flush=True)


def _keep_compared(out: Path) -> None:
    """Delete every file of ``out`` that is not compared (plots, checkpoints, journals), keeping the rest."""
    if not out.exists():
        return
    for path in sorted(out.rglob("*"), reverse=True):
        if path.is_file() and path.name not in COMPARED:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def compare(a: Path, b: Path) -> list[str]:
    """What differs between two sides' outputs of one scenario (empty: the same)."""
    result_a, result_b = (json.loads((side / "result.json").read_text()) for side in (a, b))
    if result_a["rc"] != result_b["rc"]:
        return [f"exit status {result_a['rc']} vs {result_b['rc']}: {_last_line(b / 'stderr.txt') or _last_line(a / 'stderr.txt')}"]
    differences = []
    lines_a, lines_b = _privacy_lines(a), _privacy_lines(b)
    if lines_a != lines_b:
        first = next((x, y) for x, y in zip(lines_a + [""] * len(lines_b), lines_b + [""] * len(lines_a)) if x != y)
        differences.append(f"printed privacy line {first[0]!r} vs {first[1]!r}")
    files_a, files_b = _compared_files(a / "out"), _compared_files(b / "out")
    for name in sorted(files_a ^ files_b):
        differences.append(f"{name} only on the {'first' if name in files_a else 'second'} side")
    for name in sorted(files_a & files_b):
        if (what := _file_difference(a / "out" / name, b / "out" / name)) is not None:
            differences.append(f"{name}: {what}")
    return differences


def _last_line(path: Path) -> str:
    lines = path.read_text().strip().splitlines()
    return lines[-1] if lines else ""


def _privacy_lines(side: Path) -> list[str]:
    text = (side / "stdout.txt").read_text()
    return [line.rstrip() for line in text.splitlines() if PRIVACY_LINE.search(line) and not line.startswith(POOL_NOTE)]


def _compared_files(out: Path) -> set[str]:
    if not out.exists():
        return set()
    return {str(path.relative_to(out)) for path in out.rglob("*") if path.is_file() and path.name in COMPARED}


def _file_difference(a: Path, b: Path) -> str | None:
    if a.suffix == ".csv":
        return _first_difference(_csv_rows(a), _csv_rows(b))
    if a.suffix == ".json":
        return _first_difference(_stable(json.loads(a.read_text())), _stable(json.loads(b.read_text())))
    return _tensor_difference(a, b)


def _csv_rows(path: Path) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return [{key: value for key, value in row.items() if not _unstable(key)} for row in rows]


def _unstable(key: object) -> bool:
    name = str(key).lower()
    return name in UNSTABLE_KEYS or any(part in name for part in UNSTABLE_KEY_PARTS) or "wall" in name


def _stable(value: object) -> object:
    if isinstance(value, dict):
        return {key: _stable(item) for key, item in value.items() if not _unstable(key)}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def _first_difference(a: object, b: object, where: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{where}/{key} only on the {'first' if key in a else 'second'} side"
            if (found := _first_difference(a[key], b[key], f"{where}/{key}")) is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where or '/'}: {len(a)} vs {len(b)} entries"
        return next((found for i, (x, y) in enumerate(zip(a, b)) if (found := _first_difference(x, y, f"{where}[{i}]"))), None)
    same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    return None if same else f"{where or '/'}: {_short(a)} vs {_short(b)}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _tensor_difference(a: Path, b: Path) -> str | None:
    import torch

    state_a, state_b = (torch.load(path, map_location="cpu", weights_only=True) for path in (a, b))
    if (found := _first_difference(_shapes(state_a), _shapes(state_b))) is not None:
        return found
    tensors_a, tensors_b = _tensors(state_a), _tensors(state_b)
    for name, x in tensors_a.items():
        bits_x, bits_y = (t.detach().contiguous().reshape(-1).view(torch.uint8) for t in (x, tensors_b[name]))
        if not torch.equal(bits_x, bits_y):
            unequal = (bits_x.reshape(x.numel(), -1) != bits_y.reshape(x.numel(), -1)).any(dim=1).sum().item()
            return f"{name}: {unequal} of {x.numel()} elements differ in their bits"
    return None


def _tensors(value: object, where: str = "") -> dict:
    """Every tensor of a (nested) state, by its path."""
    import torch

    if isinstance(value, torch.Tensor):
        return {where or "/": value}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return {name: tensor for key, item in items for name, tensor in _tensors(item, f"{where}/{key}").items()}


def _shapes(value: object) -> object:
    """The state with each tensor replaced by its dtype and shape (its bits are compared apart)."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"tensor {value.dtype} {list(value.shape)}"
    if isinstance(value, dict):
        return {str(key): _shapes(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shapes(item) for item in value]
    return value


def report(plan: list[dict], first: Path, second: Path, *, second_plan_keys: set[str] | None = None) -> int:
    """Print one line per scenario; 1 if any differs, else 0."""
    differs = 0
    for entry in plan:
        key = entry["key"]
        if "skip" in entry:
            print(f"{key}: skipped: {entry['skip']}")
            continue
        differences = compare(first / key, second / key)
        differs += bool(differences)
        print(f"{key}: " + (f"DIFFERS: {'; '.join(differences)}" if differences else "same"))
    for key in sorted((second_plan_keys or set()) - {entry["key"] for entry in plan}):
        differs += 1
        print(f"{key}: DIFFERS: a shipped scenario of the second side only")
    return 1 if differs else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", type=Path, nargs="+", metavar="CHECKOUT",
                        help="one checkout (with --save or --against) or two (before, after), each with .venv/bin/privsilo")
    parser.add_argument("--save", type=Path, metavar="DIR", help="run the one checkout and keep its outputs in DIR")
    parser.add_argument("--against", type=Path, metavar="DIR", help="run the one checkout with DIR's arguments and compare with DIR")
    parser.add_argument("--work", type=Path, metavar="DIR", help="where the compared side's outputs go (default: a temporary folder)")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT", help="only scenarios whose path contains TEXT (repeatable)")
    parser.add_argument("--no-pool", dest="pool", action="store_false", help="start Ray for each command instead of a warm pool")
    args = parser.parse_args(argv)
    checkouts = [path.resolve() for path in args.checkouts]
    if (args.save or args.against) and len(checkouts) != 1 or not (args.save or args.against) and len(checkouts) != 2:
        parser.error("give two checkouts, or one with --save DIR or --against DIR")
    if args.save and args.against:
        parser.error("give --save or --against, not both")
    if args.save:
        plan = plan_for(checkouts[0], args.only)
        seconds = run_side(checkouts[0], plan, args.save.resolve(), pool=args.pool)
        print(f"saved {sum('skip' not in entry for entry in plan)} scenarios of {checkouts[0]} to {args.save} in {seconds:.0f} s")
        return 0
    if args.against:
        saved = args.against.resolve()
        plan = [entry for entry in json.loads((saved / "manifest.json").read_text())["plan"]
                if not args.only or any(part in entry["key"] for part in args.only)]
        work = _work_dir(args.work)
        seconds = run_side(checkouts[0], plan, work, pool=args.pool)
        print(f"ran {checkouts[0]} in {seconds:.0f} s (outputs in {work}); compared with {saved}:")
        return report(plan, saved, work, second_plan_keys={entry["key"] for entry in plan_for(checkouts[0], args.only)})
    plan = plan_for(checkouts[0], args.only)
    work = _work_dir(args.work)
    times = [run_side(checkout, plan, work / side, pool=args.pool) for checkout, side in zip(checkouts, ("before", "after"))]
    print(f"ran before in {times[0]:.0f} s, after in {times[1]:.0f} s (outputs in {work}):")
    return report(plan, work / "before", work / "after", second_plan_keys={entry["key"] for entry in plan_for(checkouts[1], args.only)})


def _work_dir(given: Path | None) -> Path:
    return (given or Path(tempfile.mkdtemp(prefix="same_outputs-"))).resolve()


if __name__ == "__main__":
    sys.exit(main())
