"""ULDP-FL: user-level DP across silos (Kato et al., VLDB 2024): variants NAIVE, GROUP-k, AVG, AVG-w and SGD,
user-level sub-sampling, and their user-level accountant. Importing the package loads neither torch nor Opacus
(``privsilo validate`` relies on it): the accountant's names are loaded on first use (PEP 562), and the silo-side
training lives in :mod:`privsilo.mechanisms.uldp.training`, imported only by the silos."""
from __future__ import annotations

from importlib import import_module
from typing import Any

from privsilo.mechanisms.uldp.variants import GroupRounding, Variant

_ACCOUNTANT_NAMES = ("UldpAccountant", "epsilon", "group_epsilon", "group_exponent")


def __getattr__(name: str) -> Any:
    if name in _ACCOUNTANT_NAMES:
        return getattr(import_module("privsilo.mechanisms.uldp.accountant"), name)
    raise AttributeError(f"module 'privsilo.mechanisms.uldp' has no attribute {name!r}")


__all__ = ["GroupRounding", "Variant", *_ACCOUNTANT_NAMES]
