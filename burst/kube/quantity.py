"""Kubernetes resource quantities ("500m", "4", "16Gi") as plain numbers.

Read by the watch (GPU, CPU and memory requests, quotas) and by the sandbox's scheduler.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

_SUFFIXES = {
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


_LONGEST_FIRST = tuple(sorted(_SUFFIXES.items(), key=lambda item: len(item[0]), reverse=True))


def quantity(value: Any) -> float:
    """A quantity as a number (bytes for memory, cores for CPU); None and "" are 0."""
    if value is None or value == "":
        return 0.0
    return _parsed(str(value))


@lru_cache(maxsize=4096)  # a cluster's requests repeat a few strings ("1", "16Gi") many times
def _parsed(value: str) -> float:
    text = value.strip()
    for suffix, factor in _LONGEST_FIRST:
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)
