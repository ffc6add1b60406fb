"""Users' own models and datasets: ``package.module:callable`` import strings and names registered by installed
packages under the entry-point groups ``privsilo.models`` and ``privsilo.datasets``.

An import string is resolved as uvicorn or gunicorn resolve theirs: the current directory is put on ``sys.path``
first, so a module beside the scenario's working directory imports without installing it. Ray's local workers get
the driver's current directory on their path too. On a cluster the workers may run elsewhere, and a warm pool's
actors were started by another run: :mod:`privsilo.simulator.runtime.shipping` sends the user's code along with a run's Ray job
(``ray.ship_code``).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import re
import sys
from typing import Any, Callable, Sequence

GROUPS = {"model": "privsilo.models", "dataset": "privsilo.datasets"}
_IMPORT_STRING = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class UserCodeError(ValueError):
    """A user's model or dataset callable that cannot be found, called or used; the message says why."""


def is_import_string(name: str) -> bool:
    """True for ``package.module:callable`` (dotted module, colon, dotted attribute path)."""
    return bool(_IMPORT_STRING.fullmatch(name))


def check_name(kind: str, name: str, builtins: Sequence[str]) -> None:
    """Raise ValueError ("allowed: ...") unless ``name`` is built in, registered for ``kind`` or an import string
    (whether the import string resolves is checked when it is used)."""
    if name in builtins or is_import_string(name) or name in registered(kind):
        return
    others = sorted(registered(kind))
    raise ValueError(f"allowed: {', '.join(builtins)}" + (f", the registered {', '.join(others)}" if others else "")
                     + f", or your own {'factory' if kind == 'model' else 'loader'} as 'package.module:"
                     + f"{'factory' if kind == 'model' else 'loader'}'")


def registered(kind: str) -> dict[str, importlib.metadata.EntryPoint]:
    """Names installed packages register for ``kind`` (``model`` or ``dataset``), by entry-point name."""
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=GROUPS[kind])}


def resolve(kind: str, name: str) -> Callable[..., Any]:
    """The callable behind a registered name or an import string; :class:`UserCodeError` if there is none."""
    entry = registered(kind).get(name)
    if entry is not None:
        target, where = _load_entry_point(entry), f"entry point {entry.value!r} ({GROUPS[kind]})"
    elif is_import_string(name):
        target, where = _import(name), repr(name)
    else:
        raise UserCodeError(f"no {kind} {name!r}: not a registered name and not of the form 'package.module:callable'")
    if not callable(target):
        raise UserCodeError(f"{where} is a {type(target).__name__}, not a callable")
    return target


def _load_entry_point(entry: importlib.metadata.EntryPoint) -> Any:
    try:
        return entry.load()
    except Exception as exc:  # any failure inside the user's package is the user's to see, in one line
        raise UserCodeError(f"entry point {entry.value!r} could not be loaded: {type(exc).__name__}: {exc}") from None


def _import(name: str) -> Any:
    module_name, _, attributes = name.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise UserCodeError(f"cannot import module {module_name!r} (from the current directory {os.getcwd()} or the "
                            f"installed packages; not from the scenario file's directory: run privsilo from the directory "
                            f"that holds {module_name.split('.')[0]!r}): {type(exc).__name__}: {exc}") from None
    for attribute in attributes.split("."):
        if not hasattr(target, attribute):
            raise UserCodeError(f"module {module_name!r} has no attribute {attributes!r}")
        target = getattr(target, attribute)
    return target


def call_with(function: Callable[..., Any], kwargs: dict[str, Any], **offered: Any) -> Any:
    """``function(**kwargs)`` plus those of the ``offered`` keywords its signature accepts (by name or through
    ``**kwargs``), e.g. a model factory gets ``feature_shape`` and ``num_classes`` only if it asks for them."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # builtins without a signature: offer nothing
        parameters = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    extra = {key: value for key, value in offered.items() if (takes_any or key in parameters) and key not in kwargs}
    return function(**kwargs, **extra)


def describe(function: Callable[..., Any]) -> str:
    """``module:qualname`` of a callable, the name a run records for a model or dataset given as an object."""
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', type(function).__name__)}"
