"""Queue-aware on-prem estimate: when would each pending workload start and finish if it stayed?

Part of the decision (planner.py calls it; pure, no I/O). The on-prem queue is simulated forward
per GPU product, node by node: running workloads release their GPUs on their node at their
expected end, a pod starts only where one node has its GPUs free (first fit), and pending
workloads are placed in priority, then creation order, as the ServiceConfig's `onPrem.queueing`
says the cluster starts them:
- StrictFIFO (`QueueSweep`): each as soon as its pods fit its product's nodes and everything
  ahead of it has started; a small job does not overtake a large one.
- BestEffortFIFO (`FirstFitSweep`): at each release, every waiting workload in queue order that
  fits starts, so a small job starts past a large one that does not fit, and those behind a large
  one may take the GPUs it waits for for a long time. The whole queue is run at once, and again
  each time the decision sends one of its workloads elsewhere.
A workload whose pods do not fit its product's nodes even when all are free never starts. A
workload the decision sends to a cloud leaves the queue, so those behind it move up:
`estimate()` looks without committing, `stay()` commits and `leave()` takes the workload out.
Modelling BestEffortFIFO with reservations instead (each workload at the first gap its run fits,
around those ahead: conservative backfilling) expected large jobs to start long before the
cluster starts them: on OpenB they burst late and dear (1,501 CHF against 1,169 CHF).
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from burst.model import OnPrem, RunningWorkload, Workload

Queueing = Literal["StrictFIFO", "BestEffortFIFO"]  # the ServiceConfig's onPrem.queueing


def queue_order(w: Workload) -> tuple[int, datetime, str]:
    return (-w.priority, w.created, w.uid)


def largest_product(capacity: Mapping[str, int]) -> str | None:
    """Where a workload that asks for no particular GPU product waits: the product with the most
    GPUs on-prem (by name on a tie)."""
    return max(sorted(capacity), key=lambda k: capacity[k], default=None)


class Nodes:
    """One product's nodes: each one's size and free GPUs; how many nodes have each number of
    GPUs free, so that whether pods fit is a sum over a few counts; and a max tree over the
    nodes, so that first fit finds its node in a few steps rather than a scan (a simulated
    Philly cluster has 194 nodes, and a plan places thousands of waiting jobs). The estimate and
    the simulator's cluster both keep their nodes so."""

    def __init__(self, names: list[str], sizes: list[int], free: list[int] | None = None) -> None:
        self.names, self.sizes = names, sizes
        self.free = list(sizes) if free is None else free
        self.total = sum(self.free)
        self.counts: Counter[int] = Counter(max(f, 0) for f in self.free)
        self._sizes = Counter(max(size, 0) for size in sizes)
        self._could: dict[tuple[int, int], bool] = {}
        self._leaves = 1 << max(0, len(sizes) - 1).bit_length()
        self._tree = [0] * (2 * self._leaves)  # the most GPUs free on a node, per subtree
        for k, f in enumerate(self.free):
            self._tree[self._leaves + k] = max(f, 0)
        for i in range(self._leaves - 1, 0, -1):
            self._tree[i] = max(self._tree[2 * i], self._tree[2 * i + 1])

    def add(self, k: int, gpus: int) -> None:
        """Node k lets `gpus` go (negative: takes them)."""
        f = self.free[k]
        self.counts[max(f, 0)] -= 1
        self.counts[max(f + gpus, 0)] += 1
        self.free[k] = f + gpus
        self.total += gpus
        tree, i = self._tree, self._leaves + k
        tree[i] = max(f + gpus, 0)
        i //= 2
        while i:
            most = max(tree[2 * i], tree[2 * i + 1])
            if tree[i] == most:
                break  # nothing above changes
            tree[i] = most
            i //= 2

    def fits(self, per_pod: int, pods: int) -> bool:
        """Whether the pods fit the nodes' free GPUs now."""
        if per_pod <= 0:
            return True
        if pods == 1:  # the most free on one node: the tree's root
            return self._tree[1] >= per_pod
        if per_pod * pods > self.total:
            return False
        return sum(n * (f // per_pod) for f, n in self.counts.items()) >= pods

    def could_fit(self, per_pod: int, pods: int) -> bool:
        """Whether the pods fit the nodes were they all free (asked per workload per plan; the
        nodes' sizes do not change)."""
        found = self._could.get((per_pod, pods))
        if found is None:
            found = per_pod <= 0 or sum(n * (s // per_pod) for s, n in self._sizes.items()) >= pods
            self._could[(per_pod, pods)] = found
        return found

    def place(self, per_pod: int, pods: int) -> list[int]:
        """First fit: the node of each pod (the first with its GPUs free), taken (they must
        fit)."""
        nodes: list[int] = []
        tree, leaves = self._tree, self._leaves
        for _ in range(pods if per_pod > 0 else 0):
            if tree[1] < per_pod:
                break
            i = 1
            while i < leaves:
                i = 2 * i if tree[2 * i] >= per_pod else 2 * i + 1
            nodes.append(i - leaves)
            self.add(i - leaves, -per_pod)
        return nodes


class _Product(Nodes):
    """A product's nodes as the estimate walks the queue forward."""

    def __init__(
        self,
        names: list[str],
        sizes: list[int],
        now: datetime,
        free: list[int],
        releases: list[tuple[datetime, int, int]],
    ) -> None:
        super().__init__(names, sizes, free)
        heapq.heapify(releases)  # linear, where a push per running workload is not
        self.clock = now  # start of the last workload that started here (FIFO: none before)
        self.releases = releases  # heap of (time, node, GPUs)


def products(onprem: OnPrem, now: datetime) -> dict[str, _Product]:
    """Each product's nodes from the node list, less what runs on them; a product with none
    listed is one node of its capacity (no boundaries known)."""
    listed: dict[str, tuple[list[str], list[int]]] = {}
    for node in onprem.nodes:
        names, sizes = listed.setdefault(node.accelerator, ([], []))
        names.append(node.name)
        sizes.append(node.gpus)
    for product, capacity in onprem.capacity.items():
        listed.setdefault(product, ([""], [capacity]))
    index = {p: {name: k for k, name in enumerate(names)} for p, (names, _) in listed.items()}
    free = {p: list(sizes) for p, (_, sizes) in listed.items()}
    releases: dict[str, list[tuple[datetime, int, int]]] = {p: [] for p in listed}
    for r in onprem.running:
        if r.accelerator not in listed:
            continue
        k = _node_of(r, index[r.accelerator], free[r.accelerator])
        if k is not None:
            free[r.accelerator][k] -= r.gpus
            releases[r.accelerator].append((expected_end(r, now), k, r.gpus))
    return {
        p: _Product(names, sizes, now, free[p], releases[p])
        for p, (names, sizes) in sorted(listed.items())
    }


def _node_of(r: RunningWorkload, index: Mapping[str, int], free: list[int]) -> int | None:
    """The node a running workload's GPUs are on: with no node list, the product's one; with
    its node unknown, the first with room; None on a node not listed (cordoned, say), whose GPUs
    no pending pod can have."""
    if "" in index:
        return 0
    if r.node:
        return index.get(r.node)
    return next((k for k, f in enumerate(free) if f >= r.gpus), 0)


class Estimate(NamedTuple):
    """When a workload would start and finish on-prem, on which product. A named tuple: the
    walk makes one per waiting workload per plan, and making them as frozen dataclasses took a
    sixth of a Philly replay with config/."""

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


class Sweep(ABC):
    """Walk pending workloads in queue order; each is estimated, then stays or leaves."""

    def __init__(self, onprem: OnPrem) -> None:
        self._default = largest_product(onprem.capacity)
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

    @abstractmethod
    def leave(self) -> None:
        """The estimated workload goes elsewhere: it leaves the queue, those behind move up."""


def queue_sweep(
    onprem: OnPrem,
    now: datetime,
    queueing: Queueing,
    queue: Iterable[Workload],
    runtime: Mapping[str, timedelta],
) -> Sweep:
    """A sweep of `queue` (the workloads that may stay, in queue order) as the cluster queues."""
    if queueing == "BestEffortFIFO":
        return FirstFitSweep(onprem, now, queue, runtime)
    return QueueSweep(onprem, now)


# (product, pods' GPUs, pods, releases taken or None, start): an estimate not yet stayed or left
_Taken = tuple[str, int, int, list[tuple[datetime, int, int]] | None, datetime]


class QueueSweep(Sweep):
    """Strict FIFO per product: nothing starts before the workload ahead of it."""

    def __init__(self, onprem: OnPrem, now: datetime) -> None:
        super().__init__(onprem)
        self._products = products(onprem, now)
        self._pending: _Taken | None = None
        # The start of each estimate that left since the last that stayed, by its product and pod
        # shape: leave() puts the nodes back as they were, so the next of that shape starts then
        # too, until one stays. A replay's queue holds thousands that all want to leave, of a few
        # shapes.
        self._left: dict[tuple[str | None, int, int], datetime] = {}

    def estimate(self, w: Workload, runtime: timedelta) -> Estimate:
        """Takes releases, in time order, until the pods fit (undone by leave())."""
        name = self.product_of(w)
        per, pods = w.gpus_per_pod, w.pods
        left = self._left.get((name, per, pods))
        if left is not None:
            assert name is not None
            self._pending = (name, per, pods, None, left)
            return Estimate(name, left, left + runtime)
        p = self._products.get(name) if name else None
        if p is None or not p.could_fit(per, pods):
            self._pending = None
            return Estimate(name, None, None)
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
        assert name is not None
        self._pending = (name, per, pods, popped, clock)
        return Estimate(name, clock, clock + runtime)

    def stay(self, w: Workload, estimate: Estimate) -> None:
        if self._pending is None or estimate.start is None or estimate.finish is None:
            return
        self._left.clear()  # the nodes change
        if self._pending[3] is None:  # estimated from the last that left: take the releases
            self.estimate(w, estimate.finish - estimate.start)
            assert self._pending is not None
        name, _, _, _, clock = self._pending
        p = self._products[name]
        p.clock = clock
        for node in p.place(w.gpus_per_pod, w.pods):
            heapq.heappush(p.releases, (estimate.finish, node, w.gpus_per_pod))
        self._pending = None

    def leave(self) -> None:
        if self._pending is not None:
            name, per, pods, popped, clock = self._pending
            if popped is not None:
                _give_back(self._products[name], popped)
            self._left[(name, per, pods)] = clock
        self._pending = None


def _give_back(p: _Product, popped: list[tuple[datetime, int, int]]) -> None:
    """Undo an estimate: the releases it took go back to wait."""
    for at, node, gpus in popped:
        p.add(node, -gpus)
        heapq.heappush(p.releases, (at, node, gpus))


def estimate_all(
    onprem: OnPrem,
    pending: Iterable[Workload],
    runtime: Mapping[str, timedelta],
    now: datetime,
    leaving: frozenset[str] = frozenset(),
    queueing: Queueing = "StrictFIFO",
) -> dict[str, Estimate]:
    """Estimates for every pending workload in queue order, each `leaving` one taken out of the
    queue once it is estimated (as the plan sends it away)."""
    queue = sorted(pending, key=queue_order)
    walk = queue_sweep(onprem, now, queueing, queue, runtime)
    out = {}
    for w in queue:
        est = walk.estimate(w, runtime[w.uid])
        out[w.uid] = est
        if w.uid in leaving:
            walk.leave()
        else:
            walk.stay(w, est)
    return out


def first_fit_starts(
    onprem: OnPrem,
    now: datetime,
    queue: Iterable[Workload],
    runtime: Mapping[str, timedelta],
    product_of: Callable[[Workload], str | None],
) -> dict[str, datetime]:
    """When each queued workload starts if the cluster starts, at every release, each waiting
    workload in queue order whose pods fit its product's nodes (as Kueue's BestEffortFIFO and
    the kube-scheduler do): those behind a large one take the GPUs it waits for, so it may wait
    long."""
    cluster = products(onprem, now)
    events: list[tuple[datetime, str, int, int]] = [
        (at, name, node, gpus) for name, p in cluster.items() for at, node, gpus in p.releases
    ]
    heapq.heapify(events)
    # Waiting workloads by product, then by pod shape, each shape in queue order: the first in
    # queue order that fits is the first of one shape's line, so a release looks at a few lines,
    # not at every workload waiting (Philly's queue holds thousands).
    waiting: dict[str, dict[tuple[int, int], deque[tuple[int, Workload]]]] = {}
    for order, w in enumerate(queue):
        name = product_of(w)
        if name in cluster and cluster[name].could_fit(w.gpus_per_pod, w.pods):
            shape = (w.gpus_per_pod, w.pods)
            waiting.setdefault(name, {}).setdefault(shape, deque()).append((order, w))
    starts: dict[str, datetime] = {}
    at = now
    while True:
        for name, lines in waiting.items():
            p = cluster[name]
            while p.total > 0:
                ready = [line for (per, pods), line in lines.items() if line and p.fits(per, pods)]
                if not ready:
                    break
                _, w = min(ready, key=lambda line: line[0][0]).popleft()
                starts[w.uid] = at
                for node in p.place(w.gpus_per_pod, w.pods):
                    heapq.heappush(events, (at + runtime[w.uid], name, node, w.gpus_per_pod))
        if not events:
            return starts
        at, name, node, gpus = heapq.heappop(events)
        cluster[name].add(node, gpus)
        while events and events[0][0] == at:
            _, name, node, gpus = heapq.heappop(events)
            cluster[name].add(node, gpus)


class FirstFitSweep(Sweep):
    """Best-effort FIFO, the whole queue at once (first_fit_starts). A workload that leaves is
    taken out and the queue run again before the next estimate: those behind it, and those ahead
    that it held up, start sooner."""

    def __init__(
        self,
        onprem: OnPrem,
        now: datetime,
        queue: Iterable[Workload],
        runtime: Mapping[str, timedelta],
    ) -> None:
        super().__init__(onprem)
        self._onprem, self._now, self._runtime = onprem, now, runtime
        self._queue = {w.uid: w for w in queue}  # in queue order
        self._starts: dict[str, datetime] | None = None
        self._last: str | None = None

    def estimate(self, w: Workload, runtime: timedelta) -> Estimate:
        if self._starts is None:
            queue = self._queue.values()
            self._starts = first_fit_starts(
                self._onprem, self._now, queue, self._runtime, self.product_of
            )
        self._last = w.uid
        start = self._starts.get(w.uid)
        return Estimate(self.product_of(w), start, None if start is None else start + runtime)

    def stay(self, w: Workload, estimate: Estimate) -> None:
        """Nothing to do: `w` is in the queue the sweep runs."""

    def leave(self) -> None:
        if self._last is not None and self._queue.pop(self._last, None) is not None:
            self._starts = None
        self._last = None
