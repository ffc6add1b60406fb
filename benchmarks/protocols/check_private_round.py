"""ULDP-AVG-w with ``weighting: private`` against ``weighting: plain``, same scenario and seed (so the same
deltas and noise), through the Ray actors: the largest difference between the two final models, the bound it must
respect, and the protocol's timing (``summary.json`` ``timing``). Issue 9's check on a scenario of your choice.

    python -m benchmarks.protocols.check_private_round scenarios/uldp/mnist.yaml --set data.dataset=mnist_5k \
        --set federation.rounds=1 --set federation.local_steps=5

The bound, per coordinate and round, is ``eta_g / (|U| |S|)`` times the protocol's precision bound
(:func:`privsilo.protocols.private_weighting.layout.precision_bound`, with every user and every (silo, user) pair taking
part and a 10-sigma bound on ``sum_s |z_s|``) plus the plain run's secure-aggregation rounding ``|S| 2^-(f+1)``;
rounds add up (the deltas of later rounds start from models that differ by the earlier rounds' errors, so
beyond one round the check is only indicative). Exit status 1 if the difference exceeds the bound.
"""
from __future__ import annotations

import argparse
import math
import sys

import privsilo.simulator  # noqa: F401  (Ray environment)
from privsilo.protocols.private_weighting.layout import precision_bound
from privsilo.simulator.engine import run
from privsilo.simulator.scenario import resolve_scenario


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    results = {}
    for weighting in ("plain", "private"):
        overrides = [*args.overrides, "mechanism.variant=avg_w", f"mechanism.weighting={weighting}"]
        results[weighting] = run(args.scenario, overrides=overrides, progress=True)
    scenario = resolve_scenario(args.scenario, [*args.overrides, "mechanism.weighting=private"])
    params = scenario.mechanism.params
    silos, users = scenario.data.silos, scenario.data.users.count
    fractional_bits = scenario.protocol.fractional_bits
    noise_abs_sum = 10 * params.noise_multiplier * params.max_grad_norm * math.sqrt(silos)
    per_round = params.global_lr / (users * silos) * (
        precision_bound(users=users, pairs=users * silos, num_silos=silos, fractional_bits=fractional_bits,
                        max_abs_delta=params.max_grad_norm, noise_abs_sum=noise_abs_sum)
        + silos * 2.0 ** -(fractional_bits + 1))
    bound = scenario.federation.rounds * per_round
    plain, private = results["plain"], results["private"]
    difference = max(float((private.model_state[k] - plain.model_state[k]).abs().max()) for k in plain.model_state)
    print(f"largest |private - plain| over the model: {difference:.3e}; bound {bound:.3e} "
          f"({scenario.federation.rounds} round(s) x {per_round:.3e})")
    print(f"final accuracy: plain {plain.final['accuracy']:.4f}, private {private.final['accuracy']:.4f}; "
          f"loss: plain {plain.final['loss']:.8f}, private {private.final['loss']:.8f}")
    print("private run's protocol timing (s): " + ", ".join(
        f"{key} {value:.1f}" for key, value in private.timing.items() if key.startswith("protocol")))
    return 0 if difference <= bound else 1


if __name__ == "__main__":
    sys.exit(main())
