"""Free ports on the loopback interface."""
from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free now (all bound at once, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
