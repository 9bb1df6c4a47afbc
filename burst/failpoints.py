"""Named points in the flow where a test can make burst crash, as a killed process would.

`hit(name)` is a no-op unless a test armed `name`; then it raises Crash. The reconcile pass calls
it at every boundary between recording an intent and acting on it, so the crash tests can show that
the next pass finishes whatever the dead one left half done.
"""

from __future__ import annotations

import threading

_armed: dict[str, int] = {}
_lock = threading.Lock()
POINTS = (
    "pool-intent-recorded",
    "pool-created-in-cloud",
    "local-suspended",
    "remote-created",
    "dispatch-not-recorded",
    "outcome-recorded",
    "pool-deleted-in-cloud",
    "pool-metered",
)


class Crash(BaseException):
    """Not an Exception: nothing in burst may catch it, as nothing survives a kill."""


def arm(name: str, times: int = 1) -> None:
    if name not in POINTS:
        raise ValueError(f"no failpoint {name!r}")
    with _lock:
        _armed[name] = times


def disarm() -> None:
    with _lock:
        _armed.clear()


def hit(name: str) -> None:
    if not _armed:
        return
    with _lock:
        left = _armed.get(name, 0)
        if left <= 0:
            return
        _armed[name] = left - 1
    raise Crash(name)
