"""How the decision words times and amounts in its reasons (a plan explains every workload)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime

from burst.amounts import Money
from burst.cloud.catalog import CATALOG_CURRENCY


def at(t: datetime | None, now: datetime) -> str:
    return "never" if t is None else _clock_text(t, t.date() == now.date())


@functools.lru_cache(maxsize=1 << 16)
def _clock_text(t: datetime, today: bool) -> str:
    # Cached: every plan words a reason for every pending workload, mostly with the same times.
    clock = "%H:%M:%S" if t.second else "%H:%M"
    return t.strftime(clock) if today else t.strftime(f"%Y-%m-%d {clock}")


class Words:
    """A reason worded only when read. A plan finds a reason for each of thousands of waiting
    workloads, and reads the words of those it places (or, when it explains, of all)."""

    __slots__ = ("_args", "_word")

    def __init__(self, word: Callable[..., str], *args: object) -> None:
        self._word, self._args = word, args

    def __str__(self) -> str:
        return self._word(*self._args)


def usd(micros: int) -> Money:
    return Money(micros, CATALOG_CURRENCY)
