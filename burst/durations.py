"""Durations as people write them in YAML and annotations: `90s`, `10m`, `1h30m`, `2d`, `1w`.

Used by the configuration documents and, later in the flow, by the annotation parser of the watch
step; both need the same grammar and the same error text.
"""

from __future__ import annotations

import functools
import re
from datetime import timedelta

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)(w|d|h|m|s)")
_WHOLE = re.compile(r"(?:\d+(?:w|d|h|m|s))+")


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> timedelta:
    """Parse `1h30m`-style text into a timedelta; units w, d, h, m, s, largest first, each once."""
    value = text.strip()
    if not _WHOLE.fullmatch(value):
        raise DurationError(
            f"bad duration {text!r}: expected a number and unit such as 90s, 10m, 1h30m, 2d"
        )
    seen: list[str] = []
    seconds = 0
    for number, unit in _PART.findall(value):
        if seen and list(_UNITS).index(unit) <= list(_UNITS).index(seen[-1]):
            raise DurationError(
                f"bad duration {text!r}: units must go from largest to smallest, once each"
            )
        seen.append(unit)
        seconds += int(number) * _UNITS[unit]
    return timedelta(seconds=seconds)


@functools.lru_cache(maxsize=1024)
def format_duration(delta: timedelta) -> str:
    """The shortest text parse_duration reads back as `delta` (whole seconds)."""
    seconds = int(delta.total_seconds())
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    parts = []
    for unit, size in _UNITS.items():
        if unit == "w":
            continue
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)
