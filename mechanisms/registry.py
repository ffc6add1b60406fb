"""Name -> mechanism class. Adding a mechanism means adding one line here; the actors never change.

Classes are imported when first asked for, so that ``privsilo list`` imports no mechanism and ``privsilo
validate`` only the scenario's. ``validate`` needs the mechanism's ``Params`` class and must not pay for torch,
Opacus or Ray either: a mechanism module imports those inside the methods and functions that train or account,
never at its top (``tests/system/test_cli.py`` checks both).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mechanisms.base import Mechanism

_LOCATIONS = {  # name -> "module:class"
    "none": "mechanisms.none:NoPrivacy",
    "dp_sgd": "mechanisms.dp_sgd:DpSgd",
    "dp_fedavg": "mechanisms.dp_fedavg.mechanism:DpFedAvg",
    "dprivacy": "mechanisms.dprivacy.mechanism:DPrivacy",
    "rpdp": "mechanisms.rpdp.mechanism:Rpdp",
    "uldp": "mechanisms.uldp.mechanism:Uldp",
    "pldp": "mechanisms.pldp.mechanism:Pldp",
}
MECHANISM_NAMES: tuple[str, ...] = tuple(sorted(_LOCATIONS))


def mechanism_class(name: str) -> type[Mechanism]:
    """Return the mechanism class registered under ``name`` (KeyError if there is none)."""
    module, _, cls = _LOCATIONS[name].partition(":")
    return getattr(import_module(module), cls)
