"""Queue-aware on-prem estimate: when would each pending workload start and finish if it stayed?

Part of the decision (planner.py calls it; pure, no I/O). The on-prem queue is simulated forward
per GPU product, node by node (the nodes of cluster.py): running workloads release their GPUs on
their node at their expected end, a pod starts only where one node has its GPUs free (first fit),
and pending workloads are placed in priority, then creation order, as the ServiceConfig's
`onPrem.queueing` says the cluster starts them:
- StrictFIFO (`QueueSweep`): each as soon as its pods fit its product's nodes and everything
  ahead of it has started; a small job does not overtake a large one.
- BestEffortFIFO (`FirstFitSweep`): at each release, every waiting workload in queue order that
  fits starts, so a small job starts past a large one that does not fit, and those behind a large
  one may take the GPUs it waits for for a long time. The whole queue is run at once (firstfit.py),
  each workload the decision sends elsewhere taken out of the run, and one planned onto a pool
  still launching kept in it until the pool is expected up.
A workload whose pods do not fit its product's nodes even when all are free never starts. A
workload the decision sends to a cloud leaves the queue, so those behind it move up:
`estimate()` looks without committing, `stay()` commits and `leave()` takes the workload out;
`stays()` and `leaves()` do so for one whose estimate decides nothing (it stays whatever, or its
wait sends it whatever), which a best-effort run need not run to, and a strict one stays with no
estimate made. Modelling BestEffortFIFO with reservations instead (each workload at the first
gap its run fits, around those ahead: conservative backfilling) expected large jobs to start
long before the cluster starts them: on OpenB they burst late and dear (1,501 CHF against 1,169
CHF).
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from burst.decide.cluster import Product, Start, largest_product, products
from burst.decide.firstfit import FirstFitRun, Held, queue_order
from burst.model import OnPrem, Workload

Queueing = Literal["StrictFIFO", "BestEffortFIFO"]  # the ServiceConfig's onPrem.queueing


class Estimate(NamedTuple):
    """When a workload would start and finish on-prem, on which product. A named tuple: the
    walk makes one per waiting workload per plan, and making them as frozen dataclasses took a
    sixth of a Philly replay with config/."""

    product: str | None
    start: datetime | None  # None: never on-prem (the product is missing or too small)
    finish: datetime | None


class Sweep(ABC):
    """Walk pending workloads in queue order; each is estimated, then stays or leaves."""

    def __init__(self, onprem: OnPrem) -> None:
        self._default = largest_product(onprem.capacity)
        self._gone: dict[str, Estimate] = {}
        self._capacity = dict(onprem.capacity)
        self._widest: dict[str, int] = {}
        for node in onprem.nodes:
            self._widest[node.accelerator] = max(self._widest.get(node.accelerator, 0), node.gpus)

    def product_of(self, w: Workload) -> str | None:
        return w.accelerator if w.accelerator is not None else self._default

    def capacity(self, product: str | None) -> int:
        return self._capacity.get(product, 0) if product else 0

    def widest_node(self, product: str | None) -> int | None:
        """The most GPUs of `product` on one node; None where nodes are not known."""
        return self._widest.get(product) if product else None

    @abstractmethod
    def estimate(self, w: Workload, runtime: timedelta) -> Estimate:
        """Start and finish if `w` stays; call stay() or leave() before the next estimate."""

    @abstractmethod
    def stay(self, w: Workload, estimate: Estimate) -> None:
        """The estimated workload waits on-prem: it holds its GPUs from its estimated start."""

    def stays(self, w: Workload, runtime: timedelta) -> None:
        """`w` waits on-prem whatever its estimate, which nobody reads."""
        self.stay(w, self.estimate(w, runtime))

    def leaves(self, w: Workload, runtime: timedelta) -> None:
        """`w` leaves whatever its estimate, which `left()` gives later, as if it alone of those
        that leave so had stayed (one of the sweep's `absent`). Under StrictFIFO that is its
        estimate now: those behind it change nothing."""
        self._gone[w.uid] = self.estimate(w, runtime)
        self.leave()

    def left(self, w: Workload, runtime: timedelta) -> Estimate:
        """The estimate of a workload that `leaves()`."""
        return self._gone[w.uid]

    def starts_by(self, w: Workload, runtime: timedelta, until: datetime) -> bool:
        """Whether a workload that `leaves()` would start on-prem at `until` or before."""
        start = self.left(w, runtime).start
        return start is not None and start <= until

    @abstractmethod
    def leave(self) -> None:
        """The estimated workload goes elsewhere: it leaves the queue, those behind move up."""


def queue_sweep(
    onprem: OnPrem,
    now: datetime,
    queueing: Queueing,
    queue: Iterable[Workload],
    runtime: Mapping[str, timedelta],
    absent: frozenset[str] = frozenset(),
    held: Iterable[Held] = (),
) -> Sweep:
    """A sweep of `queue` (the workloads that may stay, in queue order) as the cluster queues;
    `absent`, those of them that will leave whatever their estimate (see Sweep.leaves); `held`,
    those planned onto a pool still launching, still queued until it is up: a strict queue waits
    behind them (QueueSweep), and a best-effort one starts them if they fit first."""
    if queueing == "BestEffortFIFO":
        return FirstFitSweep(onprem, now, queue, runtime, absent, held)
    return QueueSweep(onprem, now, held)


# (product, pods' GPUs, pods, releases taken or None, start, and for one pod where it starts, its
# releases not yet given to the nodes): an estimate not yet stayed or left
_Taken = tuple[str, int, int, list[tuple[datetime, int, int]] | None, datetime, Start | None]


class QueueSweep(Sweep):
    """Strict FIFO per product: nothing starts before the workload ahead of it. One planned onto a
    pool still launching (`held`) is still in the queue: the service copies it to its pool, and
    takes it out of the queue, once the pool is up (service/remote.py, dispatch_ready). Until
    then nothing behind it starts, unless it starts on-prem first (its dispatch is then
    cancelled)."""

    def __init__(self, onprem: OnPrem, now: datetime, held: Iterable[Held] = ()) -> None:
        super().__init__(onprem)
        self._products = products(onprem, now)
        # By place in the queue, last first: each is passed as the walk reaches what is behind it.
        self._held = sorted(held, key=lambda h: queue_order(h[0]), reverse=True)
        self._pending: _Taken | None = None
        # The start of each estimate that left since the last that stayed, by its product and pod
        # shape: leave() puts the nodes back as they were, so the next of that shape starts then
        # too, until one stays. A replay's queue holds thousands that all want to leave, of a few
        # shapes.
        self._left: dict[tuple[str | None, int, int], datetime] = {}
        self._starts: dict[str, datetime] = {}  # of those that left at such a known start

    def _pass_held(self, w: Workload) -> None:
        """Those held ahead of `w` in the queue, in turn: each starts on-prem if it would before
        its pool is up, else its product starts nothing before then, when it leaves."""
        key = queue_order(w)
        while self._held and queue_order(self._held[-1][0]) < key:
            h, runtime, up = self._held.pop()
            est = self.estimate(h, runtime)
            if est.start is not None and est.start <= up:
                self.stay(h, est)
                continue
            self.leave()
            p = self._products.get(self.product_of(h) or "")
            if p is not None and p.clock < up:
                p.clock = up
                self._left.clear()  # every start moves

    def estimate(self, w: Workload, runtime: timedelta) -> Estimate:
        """Takes releases, in time order, until the pods fit (undone by leave()); for one pod,
        without giving them to the nodes until it stays (Product.first_start)."""
        if self._held:
            self._pass_held(w)
        name = self.product_of(w)
        per, pods = w.gpus_per_pod, w.pods
        left = self._left.get((name, per, pods))
        if left is not None:
            assert name is not None
            self._pending = (name, per, pods, None, left, None)
            return Estimate(name, left, left + runtime)
        p = self._products.get(name) if name else None
        if p is None or not p.could_fit(per, pods):
            self._pending = None
            return Estimate(name, None, None)
        assert name is not None
        if pods == 1 and per > 0:
            start = p.first_start(per)
            if start is None:  # more held than the nodes have (an inconsistent listing)
                self._pending = None
                return Estimate(name, None, None)
            self._pending = (name, per, pods, start.popped, start.at, start)
            return Estimate(name, start.at, start.at + runtime)
        popped: list[tuple[datetime, int, int]] = []
        clock = p.clock
        while not p.fits(per, pods):
            if not p.releases:  # more held than the nodes have (an inconsistent listing)
                _give_back(p, popped)
                self._pending = None
                return Estimate(name, None, None)
            at, node, gpus = heapq.heappop(p.releases)
            popped.append((at, node, gpus))
            p.add(node, gpus)
            clock = max(clock, at)
        self._pending = (name, per, pods, popped, clock, None)
        return Estimate(name, clock, clock + runtime)

    def stays(self, w: Workload, runtime: timedelta) -> None:
        """As Sweep.stays; a one-pod workload in one step, no estimate made. Three in four of
        those a Philly replay with config/ walks stay so (refused unpriced, or settled), on
        every plan, and most are one pod."""
        if self._held:
            self._pass_held(w)
        name, per = self.product_of(w), w.gpus_per_pod
        p = self._products.get(name) if name else None
        if p is None or w.pods != 1 or per <= 0 or not p.could_fit(per, 1):
            super().stays(w, runtime)
            return
        self._pending = None
        started = p.start_pod(per)
        if started is not None:
            self._left.clear()  # the nodes change
            heapq.heappush(p.releases, (started[1] + runtime, started[0], per))

    def leaves(self, w: Workload, runtime: timedelta) -> None:
        """As Sweep.leaves, without taking the releases where one of its product and pod shape
        left since the last that stayed: its start is known (most of a replay's backlog leaves
        so, pass after pass, for the one or two placed)."""
        if self._held:
            self._pass_held(w)
        left = self._left.get((self.product_of(w), w.gpus_per_pod, w.pods))
        if left is None:
            super().leaves(w, runtime)
        else:
            self._starts[w.uid] = left  # its Estimate made only if asked (left())

    def left(self, w: Workload, runtime: timedelta) -> Estimate:
        start = self._starts.get(w.uid)
        if start is None:
            return super().left(w, runtime)
        return Estimate(self.product_of(w), start, start + runtime)

    def stay(self, w: Workload, estimate: Estimate) -> None:
        if self._pending is None or estimate.start is None or estimate.finish is None:
            return
        self._left.clear()  # the nodes change
        if self._pending[3] is None:  # estimated from the last that left: take the releases
            self.estimate(w, estimate.finish - estimate.start)
            assert self._pending is not None
        name, per, pods, _, clock, start = self._pending
        p = self._products[name]
        if start is not None:
            p.take(start, per)
            heapq.heappush(p.releases, (estimate.finish, start.node, per))
        else:
            p.clock = clock
            for node in p.place(per, pods):
                heapq.heappush(p.releases, (estimate.finish, node, per))
        self._pending = None

    def leave(self) -> None:
        if self._pending is not None:
            name, per, pods, popped, clock, start = self._pending
            if start is not None:
                self._products[name].give_back(start.popped)
            elif popped is not None:
                _give_back(self._products[name], popped)
            self._left[(name, per, pods)] = clock
        self._pending = None


def _give_back(p: Product, popped: list[tuple[datetime, int, int]]) -> None:
    """Undo an estimate: what the releases it took gave the nodes, taken back; they go back to
    wait."""
    for _, node, gpus in popped:
        p.add(node, -gpus)
    p.give_back(popped)


def estimate_all(
    onprem: OnPrem,
    pending: Iterable[Workload],
    runtime: Mapping[str, timedelta],
    now: datetime,
    leaving: frozenset[str] = frozenset(),
    queueing: Queueing = "StrictFIFO",
    held: Iterable[Held] = (),
) -> dict[str, Estimate]:
    """Estimates for every pending workload in queue order, each `leaving` one taken out of the
    queue once it is estimated (as the plan sends it away); `held`, as queue_sweep's."""
    queue = sorted(pending, key=queue_order)
    walk = queue_sweep(onprem, now, queueing, queue, runtime, held=held)
    out = {}
    for w in queue:
        est = walk.estimate(w, runtime[w.uid])
        out[w.uid] = est
        if w.uid in leaving:
            walk.leave()
        else:
            walk.stay(w, est)
    return out


class FirstFitSweep(Sweep):
    """Best-effort FIFO, the whole queue at once (firstfit.py): a workload that leaves is taken
    out of the run, and those behind it, and those ahead that it held up, start sooner."""

    def __init__(
        self,
        onprem: OnPrem,
        now: datetime,
        queue: Iterable[Workload],
        runtime: Mapping[str, timedelta],
        absent: frozenset[str] = frozenset(),
        held: Iterable[Held] = (),
    ) -> None:
        super().__init__(onprem)
        self._run = FirstFitRun(onprem, now, queue, runtime, self.product_of, absent, held)
        self._last: str | None = None

    def estimate(self, w: Workload, runtime: timedelta) -> Estimate:
        self._last = w.uid
        return self._started(w, runtime)

    def stay(self, w: Workload, estimate: Estimate) -> None:
        """Nothing to do: `w` is in the queue the run runs."""

    def stays(self, w: Workload, runtime: timedelta) -> None:
        """Nothing to run: `w` is in the queue, and running to its start moves the run past the
        starts of those that leave after it, only to take it back."""

    def leave(self) -> None:
        if self._last is not None:
            self._run.leave(self._last)
        self._last = None

    def leaves(self, w: Workload, runtime: timedelta) -> None:
        """Nothing to do: `w` is one of the run's absent."""

    def left(self, w: Workload, runtime: timedelta) -> Estimate:
        """Asked once the walk is done: the run then holds every workload that left before."""
        return self._started(w, runtime)

    def starts_by(self, w: Workload, runtime: timedelta, until: datetime) -> bool:
        """As Sweep.starts_by, the run taken no further than that tells."""
        return self._run.starts_by(w.uid, until)

    def _started(self, w: Workload, runtime: timedelta) -> Estimate:
        start = self._run.start(w.uid)
        return Estimate(self.product_of(w), start, None if start is None else start + runtime)
