"""The driver's watch on the Ray cluster's nodes: a node that dies is noticed within :data:`POLL_SECONDS` of the
moment Ray's GCS marks it dead (its health checks failed), not when a call to one of its actors times out.

A thread of the driver reads the GCS node table (``ray.nodes()``) every :data:`POLL_SECONDS`; each node that was
alive while watched and is now dead is reported once, to ``on_death``. Nodes that were dead before the watch
began are not the run's concern and are never reported.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Node:
    """A Ray node as a user recognises it: Ray's node id, and the address and host name it ran at."""

    node_id: str
    address: str
    hostname: str

    def __str__(self) -> str:
        return f"{self.node_id[:12]} at {self.address} ({self.hostname})"


class NodeWatch:
    """Report each watched node's death to ``on_death`` (from the watch's thread); ``dead``: those seen dead, by id.

    Use as a context manager around the time the run's actors live.
    """

    def __init__(self, on_death: Callable[[Node], None], *, poll_seconds: float = POLL_SECONDS) -> None:
        self.on_death, self.poll_seconds = on_death, poll_seconds
        self.dead: dict[str, Node] = {}
        self._alive: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="privsilo-node-watch", daemon=True)

    def __enter__(self) -> NodeWatch:
        self._poll()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10 * self.poll_seconds)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self._poll()
            except Exception:  # the GCS did not answer this time (a loaded head); the run's own calls say if it is gone
                continue

    def _poll(self) -> None:
        import ray

        for entry in ray.nodes():
            node_id = entry["NodeID"]
            if entry["Alive"]:
                self._alive.add(node_id)
            elif node_id in self._alive and node_id not in self.dead:
                node = Node(node_id, entry["NodeManagerAddress"], entry["NodeManagerHostname"])
                self.dead[node_id] = node
                self.on_death(node)
