"""Snapshots of silo and server state between rounds, for crash recovery and checkpoints.

A silo's snapshot is its whole state (mechanism state such as rPDP's spent budgets, generator, protocol keys, model
buffers) pickled *without* its records and its model's parameters: those tensors are written as references by
name and, on restore, taken from a freshly built silo of the same spec (records never change during a run, and
every round loads the broadcast into the parameters). A silo writes its snapshot to its stable
storage, the :class:`SnapshotVault`, after local training and before its update leaves it (write-ahead), so a silo
that crashes after uploading comes back with that round's spending and generator draws, and one that crashes
before uploading comes back as it was after its previous upload (nothing of the lost round was released).
"""
from __future__ import annotations

import io
import pickle
from types import MappingProxyType
from typing import Any, Iterable, Mapping

def read_only_mapping(items: dict) -> MappingProxyType:
    """A read-only view of ``items`` (how a snapshot writes a ``mappingproxy``, which pickle cannot name)."""
    return MappingProxyType(items)


class _ReferencesOut(pickle.Pickler):
    def __init__(self, file: io.BytesIO, references: Mapping[str, Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._names = {id(value): name for name, value in references.items()}

    def persistent_id(self, obj: Any) -> str | None:
        return self._names.get(id(obj))

    def reducer_override(self, obj: Any) -> Any:
        # Protocols keep keys in read-only mappings, which pickle cannot write as they are.
        if type(obj) is MappingProxyType:
            return read_only_mapping, (dict(obj),)
        return NotImplemented


class _ReferencesIn(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, references: Mapping[str, Any]) -> None:
        super().__init__(file)
        self._references = references

    def persistent_load(self, pid: str) -> Any:
        return self._references[pid]


def dump_by_reference(obj: Any, references: Mapping[str, Any] = {}) -> bytes:  # noqa: B006 (read only)
    """Pickle ``obj``, writing each object of ``references`` (name -> object) as a reference to its name."""
    buffer = io.BytesIO()
    _ReferencesOut(buffer, references).dump(obj)
    return buffer.getvalue()


def load_by_reference(blob: bytes, references: Mapping[str, Any]) -> Any:
    """Unpickle what :func:`dump_by_reference` wrote, resolving each reference to ``references[name]``."""
    return _ReferencesIn(io.BytesIO(blob), references).load()


class SnapshotVault:
    """The silos' stable storage in a run: the latest snapshot of each silo (opaque bytes), written by the silo's
    worker and read back only by a restarted worker and by the driver for checkpoints (never by the server)."""

    def __init__(self) -> None:
        self._blobs: dict[int, bytes] = {}

    def put(self, blobs: Mapping[int, bytes]) -> None:
        self._blobs.update(blobs)

    def get(self, silo_ids: Iterable[int]) -> dict[int, bytes]:
        return {silo: self._blobs[silo] for silo in silo_ids}

    def everything(self) -> dict[int, bytes]:
        return dict(self._blobs)
