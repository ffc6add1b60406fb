"""Secure mode (``secure_rng: true``): a silo's torch generator keyed from the operating system's CSPRNG, and a
numpy generator keyed the same way for the server's secret draws (ULDP's user sample).

A torch CPU generator is a Mersenne Twister (MT19937) whose ``manual_seed`` keeps only the low 32 bits of the
seed, so a seeded generator can be replayed from the seed and, even with the seed secret, by trying all 2^32
seeds. Secure mode instead fills the generator's *entire* state, 624 words of 32 bits, from ``os.urandom``, in
place, so every object holding the generator (the silo mechanism's context) draws from the new state. The
state is never stored, logged or returned. MT19937 is not a cryptographic generator: its outputs must stay
secret, which they do here (a silo only ever releases noisy sums, never raw draws), and its 19,937-bit state
cannot be enumerated. This is the role Opacus' ``secure_mode`` gives torchcsprng.
"""
from __future__ import annotations

import os

import numpy as np
import torch

MT_WORDS = 624
# Byte layout of torch's serialised CPU generator state (CPUGeneratorImplState): the initial seed (uint64),
# ``left`` and ``seeded`` (int32 each), ``next`` (uint64), then the 624 MT words, one uint64 each.
_SEED_BYTES = slice(0, 8)
_WORD_BYTES = slice(24, 24 + 8 * MT_WORDS)
_PROBE_SEED = 0x9E3779B9


def _mt_second_word(first: int) -> int:
    """MT19937's seeding recurrence (Matsumoto and Nishimura 1998, ``init_genrand``) for the second word."""
    return (1812433253 * (first ^ (first >> 30)) + 1) & 0xFFFFFFFF


def _words(state: np.ndarray) -> np.ndarray:
    return state[_WORD_BYTES].view("<u8")


def _fresh_state_template() -> np.ndarray:
    """The serialised state of a freshly seeded generator, after checking that the layout is the one we know."""
    state = torch.Generator().manual_seed(_PROBE_SEED).get_state().numpy().copy()
    words = _words(state)
    known = (
        int(state[_SEED_BYTES].view("<u8")[0]) == _PROBE_SEED
        and int(words[0]) == _PROBE_SEED
        and int(words[1]) == _mt_second_word(_PROBE_SEED)
    )
    if not known:
        raise RuntimeError(
            f"secure_rng: torch {torch.__version__} lays out its generator state in a way privsilo does not know; "
            "refusing to train without a securely keyed generator"
        )
    return state


def reseed_from_os_entropy(generator: torch.Generator) -> None:
    """Replace ``generator``'s whole state, in place, by 624 fresh 32-bit words from ``os.urandom``.

    The cached normal samples and the position in the state are those of a freshly seeded generator, and the
    generator's ``initial_seed()`` becomes 0, so nothing of the previous state or of a seed remains.
    """
    if generator.device.type != "cpu":
        raise ValueError(f"secure_rng keys CPU generators only, got one on {generator.device}")
    state = _fresh_state_template()
    state[_SEED_BYTES] = 0
    _words(state)[:] = np.frombuffer(os.urandom(4 * MT_WORDS), dtype="<u4")
    generator.set_state(torch.from_numpy(state))
    if not np.array_equal(_words(generator.get_state().numpy()), _words(state)):
        raise RuntimeError("secure_rng: torch did not accept the generator state; refusing to train")


def os_entropy_generator() -> np.random.Generator:
    """A numpy generator (PCG64) keyed with 256 bits from ``os.urandom``, never recorded: what the server draws
    in secure mode where whoever knows the seed must not learn the draw (ULDP's user sample, which amplifies
    only against a party who does not know it)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(int.from_bytes(os.urandom(32), "little"))))


__all__ = ["os_entropy_generator", "reseed_from_os_entropy"]
