"""Kubernetes resource quantities ("500m", "4", "16Gi") as plain numbers.

Read by the watch (GPU, CPU and memory requests, quotas) and by the sandbox's scheduler.
"""

from __future__ import annotations

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


def quantity(value: Any) -> float:
    """A quantity as a number (bytes for memory, cores for CPU); None and "" are 0."""
    if value is None or value == "":
        return 0.0
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(text)
