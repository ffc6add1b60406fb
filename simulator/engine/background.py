"""Work that runs in a thread of its own while the driver waits for other processes (Ray, the actors, the rounds)."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable


def in_background(function: Callable[..., Any], *args: Any) -> Future:
    """``function(*args)`` in a thread of its own, while the caller goes on."""
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="privsilo")
    future = thread.submit(function, *args)
    thread.shutdown(wait=False)
    return future
