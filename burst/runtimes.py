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
`run_end` says when a run is expected to end once it has run past its estimate, on-prem and in a
cloud alike.
"""

from __future__ import annotations

import math
import re
from collections import deque
from datetime import datetime, timedelta
from typing import Any, overload

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

    def _history(
        self, namespace: str, name: str, gpus: int, user: str
    ) -> tuple[tuple[str, ...], deque[int]] | None:
        """The most specific key with enough runs, and its runs."""
        for key in self._keys(namespace, name, gpus, user):
            runs = self._runs.get(key)
            if runs is not None and len(runs) >= AT_LEAST:
                return key, runs
        return None

    def estimate(
        self, namespace: str, name: str, gpus: int, user: str = "", allowed: timedelta | None = None
    ) -> tuple[timedelta, str] | None:
        """The estimate and where it came from, or None without enough history. `allowed`: the
        time from the workload's creation to its deadline, which caps the estimate."""
        found = self._history(namespace, name, gpus, user)
        if found is None:
            return None
        key, runs = found
        ordered = sorted(runs)
        at = ordered[min(len(ordered) - 1, math.ceil(QUANTILE * len(ordered)) - 1)]
        source = (
            f"learned: p{round(QUANTILE * 100)} of the last {len(runs)} runs of {'/'.join(key)}"
        )
        if allowed is not None and timedelta(0) < allowed < timedelta(seconds=at):
            # Its owner asked for a deadline this run could not meet by the runs like it: they
            # know this one better. A learned estimate of 18 hours for a job of 19 minutes given
            # 73 minutes kept it on-prem, its deadline counted lost.
            return allowed, f"{source}, at most the {format_duration(allowed)} to its deadline"
        return timedelta(seconds=at), source

    def longest(self, namespace: str, name: str, gpus: int, user: str = "") -> timedelta | None:
        """The longest of the runs `estimate` answers from (None: it does not answer): how long
        a run like them may take, one in five being longer than the estimate."""
        found = self._history(namespace, name, gpus, user)
        return None if found is None else timedelta(seconds=max(found[1]))


@overload
def run_end(started: datetime, estimated: datetime, now: datetime) -> datetime: ...
@overload
def run_end(started: float, estimated: float, now: float) -> float: ...
def run_end(started: Any, estimated: Any, now: Any) -> Any:
    """When a run that started at `started` is expected to end: at its `estimated` end, or once
    that is past, after as long again as it has run, the median remaining life of a heavy-tailed
    runtime, as job runtimes are. Taking one past its estimate to end now made its room look
    about to free for as long as it ran on: on-prem, the queue behind it never burst; in a
    cloud, a pool past its lifetime at the pool cap took no work ending before its own, and a
    reuse of its node was priced as keeping it up for the new run alone."""
    return estimated if estimated > now else now + (now - started)
