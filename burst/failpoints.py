"""Named points in the flow where a test can make burst crash, as a killed process would.

`hit(name)` is a no-op unless a test armed `name`; then it raises Crash, or, armed with `then`,
calls it and carries on (a leader that is replaced at that line without noticing). The reconcile
pass calls it at every boundary between recording an intent and acting on it, so the crash and
failover tests can show that the next pass, or the next leader, finishes whatever was left half
done, and that nothing is done twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_armed: dict[str, int] = {}
_then: dict[str, Callable[[], None]] = {}
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


def arm(name: str, times: int = 1, then: Callable[[], None] | None = None) -> None:
    if name not in POINTS:
        raise ValueError(f"no failpoint {name!r}")
    with _lock:
        _armed[name] = times
        if then is not None:
            _then[name] = then


def disarm() -> None:
    with _lock:
        _armed.clear()
        _then.clear()


def hit(name: str) -> None:
    if not _armed:
        return
    with _lock:
        left = _armed.get(name, 0)
        if left <= 0:
            return
        _armed[name] = left - 1
        then = _then.get(name)
    if then is None:
        raise Crash(name)
    then()
