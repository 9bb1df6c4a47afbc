"""Queue-aware on-prem estimate: when would each pending workload start and finish if it stayed?

Part of the decision (planner.py calls it; pure, no I/O). The on-prem queue is simulated forward
per GPU product: running workloads release their GPUs at their expected end, and pending ones start
in priority, then creation order, each as soon as its product has enough free GPUs and everything
ahead of it in that product's queue has started (strict FIFO, as Kueue's StrictFIFO queues behave;
a small job does not overtake a large one). A workload that needs more GPUs than its product has
on-prem never starts. A workload the decision sends to a cloud leaves the queue, so those behind it
move up: `QueueSweep.estimate()` looks without committing, `stay()` commits.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from burst.model import OnPrem, RunningWorkload, Workload


def queue_order(w: Workload) -> tuple[int, datetime, str]:
    return (-w.priority, w.created, w.uid)


@dataclass
class _Product:
    capacity: int
    free: int
    clock: datetime  # start of the last workload that started here (FIFO: none starts earlier)
    releases: list[tuple[datetime, int]] = field(default_factory=list)  # heap of (time, GPUs)


@dataclass(frozen=True, slots=True)
class Estimate:
    product: str | None
    start: datetime | None  # None: never on-prem (the product is missing or too small)
    finish: datetime | None


def expected_end(r: RunningWorkload, now: datetime) -> datetime:
    """When a running workload is expected to let its GPUs go. One that has run past its estimate
    (a guess, or learned from runs unlike it) is expected to run on for as long as it has run:
    the median remaining life of a heavy-tailed runtime, as job runtimes are. Taking it to end now
    made the queue behind it look about to start for as long as it kept running, so a job
    waiting there never burst (with learned runtimes, most of the missed deadlines)."""
    end = r.expected_end
    if end > now:
        return end
    if r.started is not None and r.started < now:
        return now + (now - r.started)
    return now


class QueueSweep:
    """Walk pending workloads in queue order; each is estimated, then stays or leaves."""

    def __init__(self, onprem: OnPrem, now: datetime) -> None:
        self._now = now
        self._products: dict[str, _Product] = {}
        for product, capacity in sorted(onprem.capacity.items()):
            self._products[product] = _Product(capacity, capacity, now)
        products = self._products
        for r in onprem.running:
            p = products.get(r.accelerator)
            if p is None:
                continue
            p.free -= r.gpus
            p.releases.append((expected_end(r, now), r.gpus))
        for p in self._products.values():
            heapq.heapify(p.releases)  # linear, where a push per running workload is not
        # Where a workload that asks for no particular GPU product waits: the largest product.
        self._default = max(
            sorted(self._products), key=lambda k: self._products[k].capacity, default=None
        )
        self._pending: tuple[str, list[tuple[datetime, int]], int, datetime] | None = None

    def product_of(self, w: Workload) -> str | None:
        return w.accelerator if w.accelerator is not None else self._default

    def capacity(self, product: str | None) -> int:
        p = self._products.get(product) if product else None
        return p.capacity if p else 0

    def estimate(self, w: Workload, runtime: timedelta) -> Estimate:
        """Start and finish if `w` stays; call stay() or leave() before the next estimate."""
        name = self.product_of(w)
        p = self._products.get(name) if name else None
        needs = w.gpus
        if p is None or needs > p.capacity:
            self._pending = None
            return Estimate(name, None, None)
        popped: list[tuple[datetime, int]] = []
        free, clock = p.free, p.clock
        while free < needs:
            at, gpus = heapq.heappop(p.releases)
            popped.append((at, gpus))
            free += gpus
            clock = max(clock, at)
        assert name is not None
        self._pending = (name, popped, free, clock)
        return Estimate(name, clock, clock + runtime)

    def stay(self, w: Workload, estimate: Estimate) -> None:
        if self._pending is None or estimate.start is None or estimate.finish is None:
            return
        name, _, free, clock = self._pending
        p = self._products[name]
        p.free, p.clock = free - w.gpus, clock
        heapq.heappush(p.releases, (estimate.finish, w.gpus))
        self._pending = None

    def leave(self) -> None:
        """The estimated workload goes elsewhere: undo the look-ahead."""
        if self._pending is not None:
            name, popped, _, _ = self._pending
            p = self._products[name]
            for item in popped:
                heapq.heappush(p.releases, item)
        self._pending = None


def estimate_all(
    onprem: OnPrem,
    pending: Iterable[Workload],
    runtime: Mapping[str, timedelta],
    now: datetime,
    leaving: frozenset[str] = frozenset(),
) -> dict[str, Estimate]:
    """Estimates for every pending workload, with `leaving` ones taken out of the queue."""
    sweep = QueueSweep(onprem, now)
    out = {}
    for w in sorted(pending, key=queue_order):
        est = sweep.estimate(w, runtime[w.uid])
        out[w.uid] = est
        if w.uid in leaving:
            sweep.leave()
        else:
            sweep.stay(w, est)
    return out
