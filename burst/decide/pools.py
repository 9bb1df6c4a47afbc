"""The pools a plan can place workloads in: the open ones it found and the ones it plans, each with
its free GPUs per node; how they are kept for the workloads that may use them; and the
deterministic name a new pool gets.

The open pools of a policy (`PolicyPools`; and those of all policies that share their pools, which
their workloads may reuse) are sorted once per plan, and each kind of request (its
GPU request, spot allowed or not) keeps those it may use (`EligiblePools`) in two orders, as
reuse.py reads them: by price per GPU for reuse, by price per node in lists of one node size for
growth. Both are cut into blocks of about sqrt(n) pools that know the most free room (and the
fewest nodes) among their pools, followed as pools fill and grow, so that a workload can pass a
whole block by."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from math import isqrt

from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, TargetSpec
from burst.decide.candidates import Candidate, allowed_accelerators, interruptible
from burst.decide.wording import usd
from burst.model import Action, CreatePool, OfferKey, ResizePool, Workload


@dataclass(slots=True)
class OpenPool:
    """A pool workloads can be placed in during this plan: an existing one or one planned here."""

    name: str
    target: TargetSpec
    policy: str
    offer: OfferKey
    hourly_micros: int
    free: list[int]  # free GPUs per node
    ready_at: datetime
    existing: bool
    nodes_before: int
    created: datetime | None = None
    used: bool = False
    cost_micros: int = 0
    reasons: list[str] = field(default_factory=list)
    free_max: int = 0
    free_total: int = 0
    seq: int = 0  # the order it was opened in this plan: the last tie-break between pools
    unavailable: bool = False  # its offer is backed off: it takes work on its nodes, grows none
    interruptible: bool = False  # runs here are timed with spot restarts (expected_run)
    launch: timedelta = timedelta(0)  # how long a new node takes: the target's provisioning
    # Per node, when its known work ends (None: none); empty when the pool view did not say.
    busy: list[datetime | None] = field(default_factory=list)
    # Past its lifetime: when the last of its known work ends (reuse.best_at_pool_limit); else None.
    drains_until: datetime | None = None
    # Per node, when it is expected up, for nodes on their way to a pool that takes work (None:
    # up); empty when every node is.
    up: list[datetime | None] = field(default_factory=list)
    watchers: list[_Block] = field(default_factory=list, repr=False, compare=False)
    _slots: dict[int, int] = field(default_factory=dict)  # pods that fit now, per pod size

    @property
    def nodes(self) -> int:
        return len(self.free)

    def extra_nodes_for(self, w: Workload) -> int | None:
        """How many empty nodes must be added for `w` to fit (0: it fits now); None: never.

        All pods of a workload are the same size, so first-fit places exactly the sum over nodes
        of free // per-pod GPUs; no search is needed.
        """
        per_pod = w.gpus_per_pod
        per_new_node = self.offer.gpus // per_pod
        if per_new_node == 0:
            return None
        slots = self._slots.get(per_pod)
        if slots is None:  # counted once per pod size until the pool changes: asked per workload
            slots = sum(f // per_pod for f in self.free) if self.free_max >= per_pod else 0
            self._slots[per_pod] = slots
        return max(0, -(-(w.pods - slots) // per_new_node))

    def fits(self, w: Workload) -> bool:
        return self.free_total >= w.gpus and self.extra_nodes_for(w) == 0

    def grow(self, nodes: int, now: datetime) -> None:
        """Add `nodes` empty nodes, asked for now: up a launch from now, or with the pool if it
        is up later."""
        up = now + self.launch
        if up > self.ready_at:
            self.up = (self.up or [None] * self.nodes) + [up] * nodes
        elif self.up:
            self.up += [None] * nodes
        if self.busy:
            self.busy += [None] * nodes
        self._refresh(self.free + [self.offer.gpus] * nodes)

    def place(self, w: Workload, finish: datetime) -> None:
        nodes = first_fit(self.free, w.gpus_per_pod, w.pods)
        assert nodes is not None
        self.used = True
        for k in dict.fromkeys(nodes) if self.busy else ():
            self.busy[k] = max(finish, self.busy[k] or finish)
        left = list(self.free)
        for k in nodes:
            left[k] -= w.gpus_per_pod
        self._refresh(left)

    def timed(self, w: Workload, now: datetime, run: timedelta) -> tuple[datetime, timedelta]:
        """When `w`, placed here now for a run of `run`, ends (a run after the pool is up and the
        last of the nodes it takes that are on their way), and how much longer than the work
        known on those nodes it keeps them up (0 where the pool's work is not known)."""
        start = max(now, self.ready_at)
        if not self.up and not self.busy:
            return start + run, timedelta(0)
        nodes = first_fit(self.free, w.gpus_per_pod, w.pods)
        assert nodes is not None
        taken = dict.fromkeys(nodes)
        if self.up:
            start = max([start, *(u for k in taken if (u := self.up[k]) is not None)])
        finish = start + run
        kept = timedelta(0)
        for k in taken if self.busy else ():
            kept += max(timedelta(0), finish - max(start, self.busy[k] or start))
        return finish, kept

    def _refresh(self, free: list[int]) -> None:
        before = (self.free_max, self.free_total, len(self.free))
        self.free = free
        self.free_max = max(free, default=0)
        self.free_total = sum(free)
        self._slots.clear()
        for watcher in self.watchers:
            watcher.changed(self, *before)

    def __post_init__(self) -> None:
        self.interruptible = interruptible(self.target, self.offer.capacity)
        self.launch = self.target.provisioning
        self._refresh(self.free)


class _Block:
    """A run of pools in one of the orders below, and what is most and least among them (the most
    free GPUs on a node and in all, the largest node, the fewest nodes): a workload that needs more
    room, or a growth that the node limit stops, passes the whole run by."""

    __slots__ = (
        "end",
        "floor",
        "free_max",
        "free_total",
        "gpus_max",
        "holders",
        "nodes_min",
        "pools",
        "stale",
        "start",
    )

    def __init__(self, pools: list[OpenPool], start: int, end: int) -> None:
        self.pools, self.start, self.end = pools[start:end], start, end
        self.floor = self.pools[0].hourly_micros  # no pool in it, then or later, is cheaper
        self.gpus_max = max([p.offer.gpus for p in self.pools])
        self.free_max = self.free_total = self.nodes_min = 0
        # How many of its pools have the most room on a node, the most in all, the fewest nodes.
        self.holders = (0, 0, 0)
        self.stale = True
        for pool in self.pools:
            pool.watchers.append(self)

    def changed(self, pool: OpenPool, free_max: int, free_total: int, nodes: int) -> None:
        """`pool` had `free_max`, `free_total` and `nodes` before a placement or a growth."""
        if self.stale:
            return
        # Followed as pools change, and counted again only when no pool is known to have the
        # most (or the fewest) any more.
        on_node, in_all, fewest = self.holders
        after = pool.free_max
        if after > self.free_max:
            self.free_max, on_node = after, 1
        else:
            on_node += (after == self.free_max) - (free_max == self.free_max)
        after = pool.free_total
        if after > self.free_total:
            self.free_total, in_all = after, 1
        else:
            in_all += (after == self.free_total) - (free_total == self.free_total)
        after = len(pool.free)  # a pool only gains nodes
        fewest += (after == self.nodes_min) - (nodes == self.nodes_min)
        self.holders = (on_node, in_all, fewest)
        self.stale = not (on_node and in_all and fewest)

    def count(self) -> None:
        pools = self.pools
        on_node = [p.free_max for p in pools]
        in_all = [p.free_total for p in pools]
        nodes = [len(p.free) for p in pools]
        self.free_max, self.free_total, self.nodes_min = max(on_node), max(in_all), min(nodes)
        self.holders = (
            on_node.count(self.free_max),
            in_all.count(self.free_total),
            nodes.count(self.nodes_min),
        )
        self.stale = False

    def drop(self) -> None:
        for pool in self.pools:
            pool.watchers.remove(self)

    def drop_full(self, max_nodes: int) -> None:
        """Pools of a growth block grown to the policy's node limit stay there in this plan."""
        for pool in self.pools:
            if len(pool.free) >= max_nodes:
                pool.watchers.remove(self)
        self.pools = [p for p in self.pools if len(p.free) < max_nodes]
        self.stale = True


def _blocks(pools: list[OpenPool]) -> list[_Block]:
    size = max(8, isqrt(len(pools)))
    return [_Block(pools, i, min(i + size, len(pools))) for i in range(0, len(pools), size)]


def _by_gpu_price(now: datetime) -> Callable[[OpenPool], tuple[object, ...]]:
    # Pools of one price and node size follow each other, soonest ready, then by name.
    def key(p: OpenPool) -> tuple[object, ...]:
        hourly, gpus = p.hourly_micros, p.offer.gpus
        return (hourly / gpus, hourly, gpus, max(now, p.ready_at), p.name, p.seq)

    return key


def _opened(p: OpenPool) -> int:
    return p.seq


def _by_node_price(p: OpenPool) -> tuple[object, ...]:
    # Pools of one price and launch time follow each other by name.
    return (p.hourly_micros, p.launch, p.name, p.seq)


class PolicyPools:
    """The open pools of one policy, and what each kind of request may use of them. Sorted once
    for all kinds, so that each takes its pools in order."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.opened: list[OpenPool] = []
        # The pools opened, by what a kind of request admits them by: target, GPU, on spot. A
        # kind reads the groups it admits, not every pool (a policy may have a thousand).
        self.groups: dict[tuple[str, str, bool], list[OpenPool]] = {}
        self.kinds: dict[tuple[str, str | None, bool], EligiblePools] = {}
        self._orders: tuple[list[OpenPool], list[OpenPool]] | None = None

    def open(self, pool: OpenPool) -> None:
        self.opened.append(pool)
        key = (pool.target.name, pool.offer.accelerator, pool.offer.capacity == "spot")
        self.groups.setdefault(key, []).append(pool)
        self._orders = None
        for eligible in self.kinds.values():
            if eligible.admits(pool):
                eligible.add(pool)

    def of_kind(
        self,
        policy: BurstPolicy,
        request: str | None,
        spot_ok: bool,
        catalog: Catalog,
        most_hourly: int | None = None,
    ) -> EligiblePools:
        """The pools a request for `request` GPUs under `policy` may use, spot if `spot_ok`; of
        another policy's pools, only those at most `most_hourly` USD micros a node-hour."""
        kind = (policy.metadata.name, request, spot_ok)  # one policy's, or those sharing pools
        found = self.kinds.get(kind)
        if found is None:
            if self._orders is None:
                pools = [p for p in self.opened if p.offer.gpus >= 1]
                by_gpu = sorted(pools, key=_by_gpu_price(self.now))
                self._orders = (by_gpu, sorted(pools, key=_by_node_price))
            allowed = frozenset(allowed_accelerators(policy, request, catalog))
            targets = frozenset(policy.spec.placement.targets)
            found = EligiblePools(
                targets, allowed, spot_ok, self.now, policy.metadata.name, most_hourly
            )
            admitted = [
                group
                for (target, accelerator, spot), group in self.groups.items()
                if target in targets and accelerator in allowed and (spot_ok or not spot)
            ]
            found.fill(admitted, *self._orders)
            self.kinds[kind] = found
        return found


class EligiblePools:
    """The open pools of a policy that one kind of request may use: on the policy's targets, with
    an allowed GPU, on spot only if spot is allowed. Kept up to date as pools open and fill.

    For reuse they are read by price per GPU; pools of one price and node size form a shelf,
    soonest ready (then by name) first, and all cost a workload the same. For growth they are read
    by price per node in lists of one node size, and pools of one price and launch time follow
    each other by name.
    """

    def __init__(
        self,
        targets: Collection[str],
        allowed: Collection[str],
        spot_ok: bool,
        now: datetime,
        owner: str = "",
        most_hourly: int | None = None,
    ) -> None:
        self.targets, self.allowed, self.spot_ok, self.now = targets, allowed, spot_ok, now
        # Another policy's pool than `owner`'s is admitted only at most `most_hourly` USD micros a
        # node-hour (PolicyPools.of_kind); None: any.
        self._owner, self._most_hourly = owner, most_hourly
        self.pools: list[OpenPool] = []  # every one, in the order opened
        self.interruptible: list[OpenPool] = []  # timed with restarts: no price order bounds them
        self.fastest_launch: timedelta | None = None  # among the growable pools' targets
        self._priced: list[OpenPool] = []  # reusable pools, by price per GPU once sorted
        self._priced_sorted = True
        self._shelf_end: list[int] = []  # per pool: where the next shelf starts
        self._reuse: list[_Block] | None = None
        self._growable: list[OpenPool] = []  # by price per node once sorted
        self._growable_sorted = True
        self._growth: list[_Block] | None = None
        self._growth_for: dict[int, list[_Block]] = {}  # per GPUs per pod

    def admits(self, pool: OpenPool) -> bool:
        return (
            pool.target.name in self.targets
            and pool.offer.accelerator in self.allowed
            and (self.spot_ok or pool.offer.capacity != "spot")
            and self._priced_ok(pool)
        )

    def _priced_ok(self, pool: OpenPool) -> bool:
        return (
            self._most_hourly is None
            or pool.policy == self._owner
            or pool.hourly_micros <= self._most_hourly
        )

    def fill(
        self,
        groups: list[list[OpenPool]],
        by_gpu_price: list[OpenPool],
        by_node_price: list[OpenPool],
    ) -> None:
        """Every pool it admits, from the groups of the policy's pools it admits (each in the order
        opened) and the policy's pools in both orders."""
        self.pools = sorted(
            (p for group in groups for p in group if self._priced_ok(p)), key=_opened
        )
        self.interruptible = [p for p in self.pools if p.offer.gpus >= 1 and p.interruptible]
        mine = {p.seq for p in self.pools if not p.interruptible}
        self._priced = [p for p in by_gpu_price if p.seq in mine]
        self._growable = [p for p in by_node_price if p.seq in mine and not p.unavailable]
        self.fastest_launch = min((p.launch for p in self._growable), default=None)

    def add(self, pool: OpenPool) -> None:
        """A pool opened in this plan."""
        self.pools.append(pool)
        if pool.offer.gpus < 1:
            return  # nothing fits a node without GPUs
        if pool.interruptible:
            self.interruptible.append(pool)
            return
        self._priced.append(pool)
        self._priced_sorted = False
        for block in self._reuse or ():
            block.drop()
        self._reuse = None
        if not pool.unavailable:  # a backed-off offer takes no new node
            self._growable.append(pool)
            self._growable_sorted = False
            for block in self._growth or ():
                block.drop()
            self._growth = None
            if self.fastest_launch is None or pool.launch < self.fastest_launch:
                self.fastest_launch = pool.launch

    def reuse_blocks(self) -> tuple[list[OpenPool], list[int], list[_Block]]:
        """The reusable pools by price per GPU, where each shelf ends, and blocks of them."""
        if self._reuse is None:
            if not self._priced_sorted:
                self._priced.sort(key=_by_gpu_price(self.now))
                self._priced_sorted = True
            shelves = [(p.hourly_micros, p.offer.gpus) for p in self._priced]
            ends, end = [0] * len(shelves), len(shelves)
            for i in range(len(shelves) - 1, -1, -1):
                if i + 1 < len(shelves) and shelves[i] != shelves[i + 1]:
                    end = i + 1
                ends[i] = end
            self._shelf_end = ends
            self._reuse = _blocks(self._priced)
        return self._priced, self._shelf_end, self._reuse

    def growth_blocks(self, per_pod: int) -> list[_Block]:
        """The pools that may grow by nodes that hold a pod of `per_pod` GPUs, by price per node
        in blocks of one node size, the blocks by their cheapest pool when made."""
        if self._growth is None:
            if not self._growable_sorted:
                self._growable.sort(key=_by_node_price)
                self._growable_sorted = True
            by_size: dict[int, list[OpenPool]] = {}
            for pool in self._growable:
                by_size.setdefault(pool.offer.gpus, []).append(pool)
            self._growth = [block for pools in by_size.values() for block in _blocks(pools)]
            self._growth_for.clear()
        found = self._growth_for.get(per_pod)
        if found is None:
            found = [block for block in self._growth if block.gpus_max >= per_pod]
            found.sort(key=lambda block: block.floor)  # stable: a node size's blocks keep order
            self._growth_for[per_pod] = found
        return found


def first_fit(free: list[int], per_pod: int, pods: int) -> list[int] | None:
    """The node of each pod, first fit, or None when they do not all fit (a pool's few nodes; the
    on-prem estimate's hundreds have onprem.Nodes)."""
    left, out = list(free), []
    for _ in range(pods):
        for k, f in enumerate(left):
            if f >= per_pod:
                left[k] -= per_pod
                out.append(k)
                break
        else:
            return None
    return out


def pool_name(c: Candidate, taken: Iterable[str]) -> str:
    """Deterministic: target, instance type, capacity and a generation one past any in use."""
    stem = (
        f"{c.target.name}-{c.offer.instance_type}-{'spot' if c.offer.capacity == 'spot' else 'od'}"
    )
    if c.offer.cloud == "gcp":
        stem += f"-{c.offer.gpus}x{c.offer.accelerator}"
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
    if len(stem) > 55:
        stem = stem[:46] + "-" + hashlib.sha256(stem.encode()).hexdigest()[:8]
    used = set(taken)
    generation = 1
    while f"{stem}-{generation}" in used:
        generation += 1
    return f"{stem}-{generation}"


def pool_actions(pools: Iterable[OpenPool], catalog: Catalog) -> list[Action]:
    """Create or resize, for every pool this plan placed work in."""
    out: list[Action] = []
    for pool in pools:
        if not pool.used:
            continue
        who = ", ".join(pool.reasons[:3]) + (
            f" and {len(pool.reasons) - 3} more" if len(pool.reasons) > 3 else ""
        )
        if not pool.existing:
            offer = catalog.get(pool.offer)
            assert offer is not None
            out.append(
                CreatePool(
                    pool.name,
                    pool.target.name,
                    pool.policy,
                    pool.offer,
                    pool.nodes,
                    offer.hourly,
                    f"for {who}",
                    usd(pool.cost_micros),
                )
            )
        elif pool.nodes > pool.nodes_before:
            out.append(
                ResizePool(
                    pool.name,
                    pool.nodes,
                    f"{pool.nodes_before} -> {pool.nodes} nodes for {who}",
                    usd(pool.cost_micros),
                )
            )
    return out
