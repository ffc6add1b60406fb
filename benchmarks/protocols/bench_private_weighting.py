"""The private weighting protocol (ULDP-AVG-w): privsilo's protocol against a faithful re-implementation of the
paper's per-parameter, full-exponent approach, in the same run; and the 21,840-parameter MNIST CNN.

Run: ``nice -n 10 python -m benchmarks.protocols.bench_private_weighting [--sizes 16 107] [--cnn] [--repeats 3]``.

* Small settings of the paper (Kato et al., VLDB 2024, Sec. 6, Figure 11): d = 16 and 107 parameters, 10 users
  with records in each of 3 silos, 3,072-bit keys, C = 1, P = 2^-24 (ours) / 1e-10 (the paper's code). The
  baseline re-implements the authors' ``SecureLocalTrainer.secure_weighting``, ``_secure_add_noise``,
  ``secagg_mask_params`` and ``SecureAggregator._aggregate_with_decrypt`` (uldp-fl, ``src/secure_aggregation.py``)
  on phe's number objects, as they do: per user and layer ``Enc(B_inv) * n * r * C_LCM``, then per parameter
  ``Encode(Delta) * that`` (a full-size exponent whenever the encoded value is positive, because the code sets
  ``max_int = n - 1``), the noise and the numpy-drawn masks added as phe scalars, and one decryption per parameter.
  Both give the plain weighted sum (checked). Times are CPU seconds (``time.process_time``) of one round: each
  silo's step and the server's; a round's critical path is the slowest silo plus the server (silos run in
  parallel), and the ratio of the medians is printed.
* ``--cnn``: d = 21,840 (model ``small_cnn``), 100 users allocated over 60,000 records ("uniform" records,
  "zipf" silos, privsilo.simulator.data.users), 5 silos, 3,072 bits, C = 0.1: set-up, every silo's and the server's CPU
  seconds for one round, and the round's wall time on 2 cores estimated as (sum of silo CPU) / 2 + server CPU.

CPU seconds rather than wall time: the machine this runs on is shared; each figure is the work one core does.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Callable

import numpy as np
from phe import paillier

from privsilo.protocols.paillier import PaillierKeyPair
from privsilo.protocols.private_weighting import PwpConfig
from privsilo.protocols.private_weighting.server import PwpServer
from privsilo.protocols.private_weighting.silo import PwpSilo
from privsilo.protocols.private_weighting.layout import HeadroomError, check_conversion, lcm_up_to, precision_bound
from privsilo.protocols.private_weighting.tables import horner_squarings
from privsilo.protocols.private_weighting.messages import UserDeltas

PAPER_PRECISION = 1e-10
PAPER_MAX_RECORDS = 2000


def cpu_seconds(function: Callable[[], object]) -> tuple[object, float]:
    started = time.process_time()
    result = function()
    return result, time.process_time() - started


def clipped_rows(rng: np.random.Generator, users: int, length: int, clip: float) -> np.ndarray:
    rows = rng.normal(size=(users, length))
    return rows * np.minimum(1.0, clip / np.linalg.norm(rows, axis=1, keepdims=True))


def round_inputs(histogram: np.ndarray, *, length: int, clip: float, noise_std: float, seed: int) -> dict[int, UserDeltas]:
    rng = np.random.default_rng(seed)
    inputs = {}
    for s in range(len(histogram)):
        users = np.flatnonzero(histogram[s])
        inputs[s] = UserDeltas(users=users, deltas=clipped_rows(rng, len(users), length, clip),
                               noise=rng.normal(scale=noise_std, size=length))
    return inputs


def plain_sum(histogram: np.ndarray, inputs: dict[int, UserDeltas]) -> np.ndarray:
    totals = histogram.sum(axis=0)
    return sum((histogram[s, x.users] / totals[x.users]) @ x.deltas + x.noise for s, x in inputs.items())


# ----------------------------------------------------------------------------------------------------------------
# The paper's approach (uldp-fl, src/secure_aggregation.py), on phe's number objects, as the authors wrote it.


def _paper_random_residue(modulus: int, random_state: np.random.RandomState) -> int:
    """``gen_random_int_in_GFp``: bits drawn one by one from numpy, joined as a string, rejected until < modulus."""
    while True:
        bits = random_state.randint(0, 2, modulus.bit_length())
        value = int("".join(map(str, bits)), 2)
        if value < modulus:
            return value


class PaperProtocol:
    """Protocol 1 as the authors' code runs it; set-up in the clear (untimed), rounds as they are."""

    def __init__(self, histogram: np.ndarray, *, key_bits: int, layers: tuple[int, ...], seed: int) -> None:
        self.public, self.private = paillier.generate_paillier_keypair(n_length=key_bits)
        self.public.max_int = self.public.n - 1  # as in SecureAggregator.__init__
        n = self.public.n
        self.histogram, self.layers = histogram, layers
        self.c_lcm = lcm_up_to(PAPER_MAX_RECORDS)
        state = np.random.RandomState(seed)
        self.blinds = [_paper_random_residue(n - 1, state) for _ in range(histogram.shape[1])]
        blinded_totals = [r * int(total) % n for r, total in zip(self.blinds, histogram.sum(axis=0))]
        self.encrypted_inverses = [self.public.encrypt(pow(b, -1, n)) for b in blinded_totals]
        self.shared_keys = {(a, b): int(state.randint(0, 2**31)) for a in range(len(histogram)) for b in range(len(histogram))}

    def silo_round(self, silo: int, deltas: UserDeltas, round_index: int) -> list[list[object]]:
        n = self.public.n
        layered = None
        for user, row in zip(deltas.users.tolist(), deltas.deltas):
            weighted_layers, start = [], 0
            for size in self.layers:  # secure_weighting: per layer, Enc(B_inv) * n * r * C_LCM, then per parameter
                encrypted = self.encrypted_inverses[user] * int(self.histogram[silo, user])
                encrypted *= self.blinds[user]
                encrypted *= self.c_lcm
                encoded = (row[start:start + size] / PAPER_PRECISION).astype(np.int64).astype(object) % n
                weighted_layers.append(list(encoded * encrypted))
                start += size
            layered = weighted_layers if layered is None else [[a + b for a, b in zip(x, y)] for x, y in zip(layered, weighted_layers)]
        start, noisy = 0, []
        for layer, size in zip(layered, self.layers):  # _secure_add_noise
            noise = (deltas.noise[start:start + size] / PAPER_PRECISION).astype(np.int64).astype(object) % n
            noisy.append([int(z) * self.c_lcm % n + value for z, value in zip(noise, layer)])
            start += size
        for peer in range(len(self.histogram)):  # secagg_mask_params
            if peer == silo:
                continue
            for index, layer in enumerate(noisy):
                seed = hash((self.shared_keys[min(silo, peer), max(silo, peer)], round_index, index)) & 0xFFFFFFFF
                state = np.random.RandomState(seed)
                masks = [_paper_random_residue(n, state) for _ in layer]
                noisy[index] = [v + m if silo < peer else v - m for v, m in zip(layer, masks)]
        return noisy

    def server_round(self, messages: list[list[list[object]]]) -> np.ndarray:
        n = self.public.n
        total = messages[0]
        for message in messages[1:]:
            total = [[a + b for a, b in zip(x, y)] for x, y in zip(total, message)]
        values = []
        for layer in total:
            for encrypted in layer:
                plain = self.private.decrypt(encrypted)
                plain = plain - n if plain > n // 2 else plain
                values.append(plain / self.c_lcm * PAPER_PRECISION)
        return np.array(values)


# ----------------------------------------------------------------------------------------------------------------


def set_up_ours(histogram: np.ndarray, *, length: int, clip: float, key_bits: int, rounds: int, fractional_bits: int = 24):
    """privsilo's protocol, every set-up stage, its tables sized for a run of ``rounds`` rounds; returns (server,
    silos, {"silo_max", "silo_sum", "server"} CPU s)."""
    silos_count, users = histogram.shape
    config = PwpConfig(num_users=users, num_silos=silos_count, length=length, max_abs_delta=clip,
                       fractional_bits=fractional_bits, key_bits=key_bits, min_participants=2)
    server_seconds = 0.0
    key, seconds = cpu_seconds(lambda: PaillierKeyPair.generate(key_bits))
    server_seconds += seconds
    server = PwpServer(config=config, key=key)
    silos = {s: PwpSilo(s, config=config, counts=histogram[s], planned_rounds=rounds) for s in range(silos_count)}
    silo_seconds = {s: 0.0 for s in silos}
    inbound: dict[int, object] = {}
    for stage in server.setup_stages:
        replies = {}
        for s, silo in silos.items():
            replies[s], seconds = cpu_seconds(lambda: silo.setup_reply(stage, inbound.get(s)))
            silo_seconds[s] += seconds
        inbound, seconds = cpu_seconds(lambda: server.relay(stage, replies))
        server_seconds += seconds
    return server, silos, {"silo_max": max(silo_seconds.values()), "silo_sum": sum(silo_seconds.values()), "server": server_seconds}


def ours_round(server, silos, inputs, round_index: int) -> tuple[np.ndarray, dict[int, float], float]:
    participants = tuple(sorted(silos))
    messages, silo_seconds = {}, {}
    for s in participants:
        messages[s], silo_seconds[s] = cpu_seconds(lambda: silos[s].protect(inputs[s], round_index=round_index, participants=participants))
    total, server_seconds = cpu_seconds(lambda: server.combine(messages, round_index=round_index, participants=participants))
    return total, silo_seconds, server_seconds


def paper_round(paper: PaperProtocol, inputs, round_index: int) -> tuple[np.ndarray, dict[int, float], float]:
    messages, silo_seconds = {}, {}
    for s in sorted(inputs):
        messages[s], silo_seconds[s] = cpu_seconds(lambda: paper.silo_round(s, inputs[s], round_index))
    total, server_seconds = cpu_seconds(lambda: paper.server_round([messages[s] for s in sorted(messages)]))
    return total, silo_seconds, server_seconds


def plan_text(silo: PwpSilo) -> str:
    plan, config = silo.table_plan, silo.config
    horner = horner_squarings(config.layout, config.length, plan.shifts) > 0
    return (f"{plan.shifts} table(s) per user ({'Horner over the slots' if horner else 'no squarings'}), "
            f"{plan.windows} window(s) of {plan.window_bits} bits")


def compare_small(length: int, *, repeats: int, baseline_repeats: int, key_bits: int, rounds: int) -> None:
    users, silos_count, clip = 10, 3, 1.0
    histogram = np.random.default_rng(length).integers(1, 30, size=(silos_count, users))
    layers = (length - 1, 1)  # a weight matrix and a bias, as a linear model's state_dict
    server, silos, ours_setup = set_up_ours(histogram, length=length, clip=clip, key_bits=key_bits, rounds=rounds)
    paper = PaperProtocol(histogram, key_bits=key_bits, layers=layers, seed=length)
    round_cpu: dict[str, list[float]] = {"ours": [], "paper": []}
    totals: dict[str, list[float]] = {"ours": [], "paper": []}
    silo_cpu: dict[str, list[float]] = {"ours": [], "paper": []}
    server_cpu: dict[str, list[float]] = {"ours": [], "paper": []}
    for repeat in range(max(repeats, baseline_repeats)):
        inputs = round_inputs(histogram, length=length, clip=clip, noise_std=1.0, seed=repeat)
        plain = plain_sum(histogram, inputs)
        runs = [("ours", lambda: ours_round(server, silos, inputs, repeat))] if repeat < repeats else []
        if repeat < baseline_repeats:
            runs.append(("paper", lambda: paper_round(paper, inputs, repeat)))
        for name, run in runs:
            total, per_silo, server_seconds = run()
            error = float(np.max(np.abs(total - plain)))
            allowed = (precision_bound(users=users, pairs=users * silos_count, num_silos=silos_count, fractional_bits=24,
                                       max_abs_delta=clip, noise_abs_sum=30.0) if name == "ours"
                       else (users + silos_count) * PAPER_PRECISION) + 1e-12
            assert error <= allowed, (name, error, allowed)
            round_cpu[name].append(max(per_silo.values()) + server_seconds)
            totals[name].append(sum(per_silo.values()) + server_seconds)
            silo_cpu[name].append(max(per_silo.values()))
            server_cpu[name].append(server_seconds)
    median = {name: statistics.median(values) for name, values in round_cpu.items()}
    print(f"d = {length:>3}, {users} users in each of {silos_count} silos, {key_bits}-bit keys; CPU seconds of one round "
          f"(slowest silo + server), medians of {repeats} (ours) and {baseline_repeats} (paper) rounds:")
    for name in ("paper", "ours"):
        print(f"  {name:<5}: round {median[name]:9.3f} s  (silo {statistics.median(silo_cpu[name]):9.3f} s, "
              f"server {statistics.median(server_cpu[name]):8.3f} s)")
    total = {name: statistics.median(values) for name, values in totals.items()}
    print(f"  speed-up per round: {median['paper'] / median['ours']:.0f}x; in total CPU (all silos + server: paper "
          f"{total['paper']:.2f} s, ours {total['ours']:.3f} s) {total['paper'] / total['ours']:.0f}x")
    print(f"  ours' set-up, once: slowest silo {ours_setup['silo_max']:.2f} s, server {ours_setup['server']:.2f} s "
          f"(key generation included); tables for {rounds} rounds: {plan_text(silos[0])}")


def cnn_case(*, key_bits: int, rounds: int) -> None:
    from privsilo.simulator.data.users import allocate_users

    length, users, silos_count, clip = 21_840, 100, 5, 0.1
    allocation = allocate_users(60_000, count=users, records="uniform", silos="zipf", num_silos=silos_count,
                                rng=np.random.default_rng(0))
    histogram = allocation.histogram()
    print(f"MNIST CNN: d = {length}, {users} users (N_u {int(histogram.sum(0).min())}-{int(histogram.sum(0).max())}), "
          f"{silos_count} silos, {int((histogram > 0).sum())} (silo, user) pairs with records, {key_bits}-bit keys, C = {clip}, P = 2^-24")
    wall = time.perf_counter()
    print("  set-up ...", flush=True)
    server, silos, setup = set_up_ours(histogram, length=length, clip=clip, key_bits=key_bits, rounds=rounds)
    print(f"  set-up CPU: silos {setup['silo_sum']:.1f} s in total (slowest {setup['silo_max']:.1f} s), "
          f"server {setup['server']:.1f} s; wall {time.perf_counter() - wall:.0f} s on this (shared) machine")
    inputs = round_inputs(histogram, length=length, clip=clip, noise_std=5 * clip / math.sqrt(silos_count), seed=0)
    print(f"  one round ... (tables for {rounds} rounds: {plan_text(silos[0])})", flush=True)
    wall = time.perf_counter()
    total, per_silo, server_seconds = ours_round(server, silos, inputs, 0)
    wall = time.perf_counter() - wall
    plain = plain_sum(histogram, inputs)
    error = float(np.max(np.abs(total - plain)))
    bound = precision_bound(users=users, pairs=int((histogram > 0).sum()), num_silos=silos_count, fractional_bits=24,
                            max_abs_delta=clip, noise_abs_sum=float(np.max(sum(np.abs(x.noise) for x in inputs.values()))))
    assert error <= bound + 1e-12, (error, bound)
    silo_text = ", ".join(f"{per_silo[s]:.1f}" for s in sorted(per_silo))
    print(f"  one round CPU: silos {silo_text} s; server {server_seconds:.1f} s; max error {error:.2e} (bound {bound:.2e})")
    print(f"  round on 2 cores (silos in parallel): {sum(per_silo.values()) / 2 + server_seconds:.0f} s; "
          f"wall here {wall:.0f} s (all parties in one process, one core)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[16, 107], help="model sizes d of the comparison")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of privsilo's protocol per size")
    parser.add_argument("--baseline-repeats", type=int, default=1, help="rounds of the paper's approach per size")
    parser.add_argument("--key-bits", type=int, default=3072, help="Paillier modulus bits (lcm(1..2000), the paper's N_max, must fit)")
    parser.add_argument("--rounds", type=int, default=50, help="rounds of the run the silos' tables are sized for")
    parser.add_argument("--cnn", action="store_true", help="also the 21,840-parameter CNN case (long)")
    args = parser.parse_args()
    try:
        check_conversion(key_bits=args.key_bits, max_records_per_user=PAPER_MAX_RECORDS)
    except HeadroomError as exc:
        parser.error(f"--key-bits {args.key_bits}: {exc}")
    for length in args.sizes:
        compare_small(length, repeats=args.repeats, baseline_repeats=args.baseline_repeats, key_bits=args.key_bits,
                      rounds=args.rounds)
    if args.cnn:
        cnn_case(key_bits=args.key_bits, rounds=args.rounds)


if __name__ == "__main__":
    main()
