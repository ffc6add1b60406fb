"""Name -> mechanism class. Adding a mechanism means its module and one line here; the simulator never changes: it
reads what it needs to know of a mechanism from the class (``privsilo.mechanisms.base.Mechanism``'s traits).

Classes are imported when first asked for, so that ``privsilo list`` imports no mechanism and ``privsilo
validate`` only the scenario's. ``validate`` needs the mechanism's ``Params`` class and must not pay for torch,
Opacus or Ray either: a mechanism module imports those inside the methods and functions that train or account,
never at its top (``tests/system/test_cli.py`` checks both).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from privsilo.mechanisms.base import Mechanism

_LOCATIONS = {  # name -> "module:class", in the order messages list mechanisms
    "none": "privsilo.mechanisms.none:NoPrivacy",
    "dp_sgd": "privsilo.mechanisms.dp_sgd:DpSgd",
    "rpdp": "privsilo.mechanisms.rpdp.mechanism:Rpdp",
    "uldp": "privsilo.mechanisms.uldp.mechanism:Uldp",
    "pldp": "privsilo.mechanisms.pldp.mechanism:Pldp",
    "dprivacy": "privsilo.mechanisms.dprivacy.mechanism:DPrivacy",
    "dp_fedavg": "privsilo.mechanisms.dp_fedavg.mechanism:DpFedAvg",
}
MECHANISM_NAMES: tuple[str, ...] = tuple(sorted(_LOCATIONS))  # the mechanisms privsilo ships


def register_mechanism(name: str, location: str) -> None:
    """Register the class at ``location`` (``"module:class"``) under ``name`` in this process, e.g. a mechanism
    of one's own outside this package. Ray workers learn it when they import ``module``, as they do to unpickle a
    scenario with its parameters: call this at the bottom of that module."""
    if _LOCATIONS.setdefault(name, location) != location:
        raise ValueError(f"mechanism {name!r} is already registered as {_LOCATIONS[name]}")


def mechanism_names() -> tuple[str, ...]:
    """Every registered name, sorted: the shipped mechanisms and those registered at run time."""
    return tuple(sorted(_LOCATIONS))


def mechanism_classes() -> tuple[type[Mechanism], ...]:
    """Every registered class, in registration order (imports every mechanism's module: for messages only)."""
    return tuple(mechanism_class(name) for name in _LOCATIONS)


def mechanism_class(name: str) -> type[Mechanism]:
    """Return the mechanism class registered under ``name`` (KeyError if there is none)."""
    module, _, cls = _LOCATIONS[name].partition(":")
    return getattr(import_module(module), cls)
