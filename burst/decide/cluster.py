"""The on-prem cluster as the decision's estimate sees it: each GPU product's nodes, what the
running workloads hold on them and when they are expected to let it go.

Part of the decision (pure, no I/O): onprem.py walks the waiting queue over these nodes under
StrictFIFO, firstfit.py runs it under BestEffortFIFO, and the simulator's cluster (sim/state.py)
keeps its nodes in the same `Nodes`.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import NamedTuple

from burst.model import OnPrem, RunningWorkload
from burst.runtimes import run_end


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

    free: list[int]
    total: int
    counts: Counter[int]
    _sizes: Counter[int]  # how many nodes have each size
    _could: dict[tuple[int, int], bool]  # could_fit's answers
    _leaves: int
    tree: list[int]  # the most GPUs free on a node, per subtree: tree[1] on any node

    def __init__(
        self,
        names: list[str],
        sizes: list[int],
        free: list[int] | None = None,
        like: Nodes | None = None,
    ) -> None:
        self.names, self.sizes = names, sizes
        if like is not None:  # a copy of `like`: what is free copied, what sizes give shared
            self.free, self.total = list(like.free), like.total
            self.counts, self.tree = Counter(like.counts), list(like.tree)
            self._sizes, self._could, self._leaves = like._sizes, like._could, like._leaves
            return
        self.free = list(sizes) if free is None else free
        self.total = sum(self.free)
        self.counts = Counter(max(f, 0) for f in self.free)
        self._sizes = Counter(max(size, 0) for size in sizes)
        self._could = {}
        self._leaves = 1 << max(0, len(sizes) - 1).bit_length()
        self.tree = [0] * (2 * self._leaves)
        for k, f in enumerate(self.free):
            self.tree[self._leaves + k] = max(f, 0)
        for i in range(self._leaves - 1, 0, -1):
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])

    def add(self, k: int, gpus: int) -> None:
        """Node k lets `gpus` go (negative: takes them)."""
        # The hottest function of a replay (every release an estimate takes, or gives back): no
        # calls in it.
        f = self.free[k]
        g = f + gpus
        was, now = (f if f > 0 else 0), (g if g > 0 else 0)
        self.free[k] = g
        self.total += gpus
        if was == now:
            return
        counts = self.counts
        counts[was] -= 1
        counts[now] += 1
        tree, i = self.tree, self._leaves + k
        tree[i] = now
        i >>= 1
        while i:
            left, right = tree[2 * i], tree[2 * i + 1]
            most = left if left > right else right
            if tree[i] == most:
                break  # nothing above changes
            tree[i] = most
            i >>= 1

    def fits(self, per_pod: int, pods: int) -> bool:
        """Whether the pods fit the nodes' free GPUs now."""
        if per_pod <= 0:
            return True
        if pods == 1:  # the most free on one node: the tree's root
            return self.tree[1] >= per_pod
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
        if pods == 1 and 0 < per_pod <= self.tree[1]:  # most of a replay's starts
            node = self.first_fit(per_pod)
            self.add(node, -per_pod)
            return [node]
        nodes: list[int] = []
        for _ in range(pods if per_pod > 0 else 0):
            if self.tree[1] < per_pod:
                break
            node = self.first_fit(per_pod)
            nodes.append(node)
            self.add(node, -per_pod)
        return nodes

    def first_fit(self, per_pod: int) -> int:
        """The first node with `per_pod` GPUs free (one must have them), down the max tree."""
        tree, leaves, i = self.tree, self._leaves, 1
        while i < leaves:
            i = 2 * i if tree[2 * i] >= per_pod else 2 * i + 1
        return i - leaves


class Product(Nodes):
    """A product's nodes as the estimate walks the queue forward."""

    def __init__(
        self,
        names: list[str],
        sizes: list[int],
        now: datetime,
        free: list[int],
        releases: list[tuple[datetime, int, int]],
        like: Nodes | None = None,
    ) -> None:
        super().__init__(names, sizes, free, like)
        heapq.heapify(releases)  # linear, where a push per running workload is not
        self.clock = now  # start of the last workload that started here (FIFO: none before)
        self.releases = releases  # heap of (time, node, GPUs)

    def copy_at(self, now: datetime, releases: list[tuple[datetime, int, int]]) -> Product:
        """These nodes as they are now, with `releases` to come: a copy the estimate may change
        (what could ever fit, a matter of node sizes, stays shared)."""
        return Product(self.names, self.sizes, now, self.free, releases, like=self)

    def first_start(self, per_pod: int) -> Start | None:
        """Where and when one pod of `per_pod` GPUs (more than 0) would start: releases taken off
        the heap in time order until a node has them, the nodes left as they were (`take()`
        starts it, `give_back()` undoes it); None, the releases put back, when they run out
        first (more held than the nodes have). While no node has the GPUs, a release can give
        them only to its own node, which is then the first fit: each node's GPUs change once, at
        `take()`, by what it gains less what it gives, rather than release by release, again for
        the pod, and back for one that leaves (most of a replay's waiting queue is one pod each,
        stepped through on every plan)."""
        if self.tree[1] >= per_pod:
            return Start(self.first_fit(per_pod), self.clock, [], {})
        free, releases, clock = self.free, self.releases, self.clock
        popped: list[tuple[datetime, int, int]] = []
        gained: dict[int, int] = {}
        while releases:
            at, node, gpus = heapq.heappop(releases)
            popped.append((at, node, gpus))
            if at > clock:
                clock = at
            gained[node] = gained.get(node, 0) + gpus
            if free[node] + gained[node] >= per_pod:
                return Start(node, clock, popped, gained)
        self.give_back(popped)
        return None

    def start_pod(self, per_pod: int) -> tuple[int, datetime] | None:
        """One pod of `per_pod` GPUs (more than 0) started as first_start() finds it: (its node,
        when), or None. Most pods a replay's plan stays this way find their GPUs on the node the
        last release freed, free now: they take them with no Start made."""
        if self.tree[1] >= per_pod:
            node = self.first_fit(per_pod)
            self.add(node, -per_pod)
            return node, self.clock
        start = self.first_start(per_pod)
        if start is None:
            return None
        self.take(start, per_pod)
        return start.node, start.at

    def take(self, start: Start, per_pod: int) -> None:
        """The pod of `first_start()` started: its node's GPUs taken, the releases' given."""
        node = start.node
        for k, gpus in start.gained.items():
            self.add(k, gpus - per_pod if k == node else gpus)
        if node not in start.gained:
            self.add(node, -per_pod)
        self.clock = start.at

    def give_back(self, popped: list[tuple[datetime, int, int]]) -> None:
        """Releases taken off the heap, and not given to the nodes, put back to wait."""
        for release in popped:
            heapq.heappush(self.releases, release)


class Start(NamedTuple):
    """Where and when a pod would start (Product.first_start): its node, its start, the releases
    taken for it and what each node gains from them."""

    node: int
    at: datetime
    popped: list[tuple[datetime, int, int]]
    gained: dict[int, int]


def products(onprem: OnPrem, now: datetime) -> dict[str, Product]:
    """Each product's nodes from the node list, less what runs on them; a product with none
    listed is one node of its capacity (no boundaries known)."""
    out = {}
    for product, (nodes, running, releases) in _layout(onprem).items():
        # Only a workload past its expected end is expected to end later as time passes.
        overdue = bisect.bisect_right(releases, (now, len(nodes.sizes), 0))
        due = [(expected_end(r, now), k, r.gpus) for r, k in running[:overdue]]
        out[product] = nodes.copy_at(now, due + releases[overdue:])
    return out


# Per product: its nodes with what runs on them taken, the running workloads with their node,
# and the release each expects ((end, node, GPUs)), both by expected end.
_Layout = dict[
    str, tuple[Product, list[tuple[RunningWorkload, int]], list[tuple[datetime, int, int]]]
]
_last: tuple[OnPrem, _Layout] | None = None
EPOCH = datetime.min.replace(tzinfo=UTC)  # a layout's clock: each copy of it starts at its now


def _layout(onprem: OnPrem) -> _Layout:
    """Where the nodes and running workloads are, which time does not change: kept for the last
    OnPrem asked (it is frozen), for a replay plans many times on one on-prem state."""
    global _last
    last = _last  # read once: a plan in another thread may set it meanwhile
    if last is not None and last[0] is onprem:
        return last[1]
    listed: dict[str, tuple[list[str], list[int]]] = {}
    for node in onprem.nodes:
        names, sizes = listed.setdefault(node.accelerator, ([], []))
        names.append(node.name)
        sizes.append(node.gpus)
    for product, capacity in onprem.capacity.items():
        listed.setdefault(product, ([""], [capacity]))
    index = {p: {name: k for k, name in enumerate(names)} for p, (names, _) in listed.items()}
    free = {p: list(sizes) for p, (_, sizes) in listed.items()}
    held: dict[str, list[tuple[RunningWorkload, int]]] = {p: [] for p in listed}
    for r in onprem.running:
        if r.accelerator not in listed:
            continue
        k = _node_of(r, index[r.accelerator], free[r.accelerator])
        if k is not None:
            free[r.accelerator][k] -= r.gpus
            held[r.accelerator].append((r, k))
    layout: _Layout = {}
    for p, (names, sizes) in sorted(listed.items()):
        on = sorted(held[p], key=lambda rk: (rk[0].expected_end, rk[1], rk[0].gpus))
        releases = [(r.expected_end, k, r.gpus) for r, k in on]
        layout[p] = (Product(names, sizes, EPOCH, free[p], []), on, releases)
    _last = (onprem, layout)
    return layout


def _node_of(r: RunningWorkload, index: Mapping[str, int], free: list[int]) -> int | None:
    """The node a running workload's GPUs are on: with no node list, the product's one; with
    its node unknown, the first with room; None on a node not listed (cordoned, say), whose GPUs
    no pending pod can have."""
    if "" in index:
        return 0
    if r.node:
        return index.get(r.node)
    return next((k for k, f in enumerate(free) if f >= r.gpus), 0)


def expected_end(r: RunningWorkload, now: datetime) -> datetime:
    """When a running workload is expected to let its GPUs go: past its estimate (a guess, or
    learned from runs unlike it), as runtimes.run_end says (taking it to end now, a job waiting
    behind it never burst: with learned runtimes, most of the missed deadlines); not seen
    starting, at its estimate or now."""
    if r.started is None or r.started >= now:
        return max(r.expected_end, now)
    return run_end(r.started, r.expected_end, now)
