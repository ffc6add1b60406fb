"""Name -> mechanism class. Adding a mechanism means adding it here; the actors never change."""
from __future__ import annotations

from mechanisms.base import Mechanism
from mechanisms.dp_sgd import DpSgd
from mechanisms.none import NoPrivacy
from mechanisms.rpdp.mechanism import Rpdp
from mechanisms.uldp.mechanism import Uldp

MECHANISMS: dict[str, type[Mechanism]] = {cls.name: cls for cls in (NoPrivacy, DpSgd, Rpdp, Uldp)}


def mechanism_class(name: str) -> type[Mechanism]:
    """Return the mechanism class registered under ``name`` (KeyError if there is none)."""
    return MECHANISMS[name]
