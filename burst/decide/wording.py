"""How the decision words times and amounts in its reasons (a plan explains every workload)."""

from __future__ import annotations

import functools
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


def usd(micros: int) -> Money:
    return Money(micros, CATALOG_CURRENCY)
