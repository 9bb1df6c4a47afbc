"""Runtimes nobody declared: estimates learned from the workloads seen to finish, for the decision's
on-prem estimate and its cloud costs. The service learns from the workloads it sees succeed
(kube/observe.py) and records on each dispatch the estimate and where it came from (the API's
workloads); the simulator replays with them (`burst simulate --runtimes learned`, sim/state.py).
Without enough history, the policy's default applies.

Pure and small: `Learned.observe` records how long a workload ran, keyed from the most to the least
specific (namespace, name stem, the user's label and GPUs, where the workload carries the label;
namespace, stem and GPUs; namespace and stem; namespace and GPUs); `estimate` answers
from the most specific key with enough history, a high quantile of its last runs rather than their
mean, because a job that runs longer than its estimate is the one that misses its deadline on-prem,
and says where the estimate came from. An estimate longer than the time a workload's deadline
leaves from its creation is capped at that time: its owner knows this run better than its like.
"""

from __future__ import annotations

import math
import re
from collections import deque
from datetime import timedelta

from burst.durations import format_duration

QUANTILE = 0.8  # four runs in five take no longer than the estimate
KEEP = 50  # the last runs of a key: habits change
AT_LEAST = 3  # runs of a key before it answers
# Keys remembered, the least recently run forgotten first: names that generate no suffix burst can
# strip (each run named anew by hand) make a key each, which would grow for as long as it runs.
KEYS = 20_000

# A name's trailing generated parts: numbers, hashes, dates ("train-resnet-20261130-7f3a9c").
# Generated parts carry a digit: a word ("model", "decade") is part of the name.
_GENERATED = re.compile(r"([-_.](\d+|(?=[a-f]*\d)[0-9a-f]{5,}|(?=[a-z]*\d)[a-z0-9]{5}))+$")


def stem(name: str) -> str:
    """A workload name without what generates it anew each time: runs of one job share it."""
    return _GENERATED.sub("", name.lower()) or name.lower()


class Learned:
    def __init__(self) -> None:
        self._runs: dict[tuple[str, ...], deque[int]] = {}

    @staticmethod
    def _keys(namespace: str, name: str, gpus: int, user: str) -> list[tuple[str, ...]]:
        s = stem(name)
        # One user's runs of a job are likelier alike than everyone's (their data, their
        # settings): their key answers first, where the workload says whose it is.
        mine = [(namespace, s, f"user {user}", str(gpus))] if user else []
        return [*mine, (namespace, s, str(gpus)), (namespace, s), (namespace, f"{gpus} GPUs")]

    def observe(self, namespace: str, name: str, gpus: int, seconds: int, user: str = "") -> None:
        for key in self._keys(namespace, name, gpus, user):
            runs = self._runs.pop(key, None) or deque(maxlen=KEEP)
            runs.append(seconds)
            self._runs[key] = runs  # the most recently run last
        while len(self._runs) > KEYS:
            del self._runs[next(iter(self._runs))]

    def estimate(
        self, namespace: str, name: str, gpus: int, user: str = "", allowed: timedelta | None = None
    ) -> tuple[timedelta, str] | None:
        """The estimate and where it came from, or None without enough history. `allowed`: the
        time from the workload's creation to its deadline, which caps the estimate."""
        for key in self._keys(namespace, name, gpus, user):
            runs = self._runs.get(key)
            if runs is not None and len(runs) >= AT_LEAST:
                ordered = sorted(runs)
                at = ordered[min(len(ordered) - 1, math.ceil(QUANTILE * len(ordered)) - 1)]
                what = "/".join(key)
                source = f"learned: p{round(QUANTILE * 100)} of the last {len(runs)} runs of {what}"
                if allowed is not None and timedelta(0) < allowed < timedelta(seconds=at):
                    # Its owner asked for a deadline this run could not meet by the runs like
                    # it: they know this one better. A learned estimate of 18 hours for a job of
                    # 19 minutes given 73 minutes kept it on-prem, its deadline counted lost.
                    return (
                        allowed,
                        f"{source}, at most the {format_duration(allowed)} to its deadline",
                    )
                return timedelta(seconds=at), source
        return None
