"""Step 2 of the decision, its first half: the open pool a workload reuses, or at the policy's pool
limit grows. placement.py asks; this module finds the cheapest open pool that fits without reading
every one, so that a plan's time per workload barely grows with the number of open pools.

The open pools one kind of request may use (its policy, its GPU request, spot allowed or not) are
kept in `EligiblePools`, in two orders:
- for reuse, by price per GPU (a share of a node is what a reuse costs); pools of one price and
  node size form a shelf, soonest ready first: they cost a workload the same, so the first on a
  shelf that fits is the only one to weigh;
- for growth, by price per node (whole nodes are what a growth costs), in lists of one node size
  so that a workload reads only nodes that hold its pods.
Both are cut into blocks of about sqrt(n) pools that know the most free room (and the fewest
nodes) among their pools, kept up to date as pools fill and grow: a workload passes over every
block without the room it needs, and stops once a lower bound of the cost of every pool still
ahead is above the best found. Pools on spot where the target knows its interruption rate are
timed with restarts that depend on the pool, so no price order bounds their cost: they are all
weighed (a plan has few).

The choice is the one a scan of every eligible pool makes: the least (cost, finish, name), then
the pool opened first (tests/unit/test_decide_pool_index.py compares the two). Shares are integer
micro-units wherever the Decimal quotient they replace is exact, so every cost is the same to the
micro-unit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, Inexact, localcontext
from math import isqrt

from burst.decide.candidates import expected_run
from burst.decide.caps import node_cost
from burst.decide.pools import OpenPool
from burst.model import Workload

# A cost's float and Decimal roundings are below a part in 2^52 of it, and pools sorted by a float
# price per GPU are out of order by no more: a bound lowered by a part in 2^50 is safe.
_SLACK = 2**50


@functools.lru_cache(maxsize=1024)
def _exact_below(gpus: int, offer_gpus: int) -> int:
    """Below what gpus x node cost the Decimal share gpus/offer_gpus x node cost has no rounding
    (the quotient terminates and the product keeps every digit); 0 when the quotient is rounded."""
    with localcontext() as ctx:
        ctx.clear_flags()
        share = Decimal(gpus) / offer_gpus
        if ctx.flags[Inexact]:
            return 0
        exponent = share.as_tuple().exponent
        places = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        return int(10 ** (ctx.prec - places))


def share_cost(gpus: int, offer_gpus: int, node_micros: int) -> int:
    """What `gpus` of a node of `offer_gpus` cost when the whole node costs `node_micros`, rounded
    up: ceil(gpus / offer_gpus x node_micros) in integers, or in Decimal (as before) where its
    quotient is rounded (5 of 12 GPUs), so that the same placements cost the same."""
    product = gpus * node_micros
    if 0 <= product < _exact_below(gpus, offer_gpus):
        return -(-product // offer_gpus)
    return math.ceil(Decimal(gpus) / offer_gpus * node_micros)


def _follow(top: int, holders: int, before: int, after: int) -> tuple[int, int]:
    """The most of a block and how many of its pools have it, after one went from `before` to
    `after`; no holders left: nobody is known to have the most any more."""
    if after > top:
        return after, 1
    return top, holders - (before == top) + (after == top)


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
        self.free_max, on_node = _follow(self.free_max, on_node, free_max, pool.free_max)
        self.free_total, in_all = _follow(self.free_total, in_all, free_total, pool.free_total)
        least, fewest = _follow(-self.nodes_min, fewest, -nodes, -len(pool.free))
        self.nodes_min = -least
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


class EligiblePools:
    """The open pools of a policy that one kind of request may use: on the policy's targets, with
    an allowed GPU, on spot only if spot is allowed. Kept up to date as pools open and fill.

    For reuse they are read by price per GPU; pools of one price and node size form a shelf,
    soonest ready (then by name) first, and all cost a workload the same. For growth they are read
    by price per node, one list per pod size that a node can hold, and pools of one price and
    launch time follow each other by name.
    """

    def __init__(
        self, targets: Collection[str], allowed: Collection[str], spot_ok: bool, now: datetime
    ) -> None:
        self.targets, self.allowed, self.spot_ok, self.now = targets, allowed, spot_ok, now
        self.pools: list[OpenPool] = []  # every one, in the order opened
        self.interruptible: list[OpenPool] = []  # timed with restarts: no price order bounds them
        self.fastest_launch: timedelta | None = None  # among the growable pools' targets
        self._priced: list[OpenPool] = []  # reusable pools, by price per GPU once sorted
        self._shelf_end: list[int] = []  # per pool: where the next shelf starts
        self._reuse: list[_Block] | None = None
        self._growable: list[OpenPool] = []
        self._growth: list[_Block] | None = None
        self._growth_for: dict[int, list[_Block]] = {}  # per GPUs per pod

    def admits(self, pool: OpenPool) -> bool:
        return (
            pool.target.name in self.targets
            and pool.offer.accelerator in self.allowed
            and (self.spot_ok or pool.offer.capacity != "spot")
        )

    def add(self, pool: OpenPool) -> None:
        self.pools.append(pool)
        if pool.offer.gpus < 1:
            return  # nothing fits a node without GPUs
        if pool.interruptible:
            self.interruptible.append(pool)
            return
        self._priced.append(pool)
        for block in self._reuse or ():
            block.drop()
        self._reuse = None
        if not pool.unavailable:  # a backed-off offer takes no new node
            self._growable.append(pool)
            for block in self._growth or ():
                block.drop()
            self._growth = None
            if self.fastest_launch is None or pool.launch < self.fastest_launch:
                self.fastest_launch = pool.launch

    def reuse_blocks(self) -> tuple[list[OpenPool], list[int], list[_Block]]:
        """The reusable pools by price per GPU, where each shelf ends, and blocks of them."""
        if self._reuse is None:
            now = self.now
            self._priced.sort(
                key=lambda p: (
                    p.hourly_micros / p.offer.gpus,
                    p.hourly_micros,
                    p.offer.gpus,
                    max(now, p.ready_at),
                    p.name,
                    p.seq,
                )
            )
            ends, end = [0] * len(self._priced), len(self._priced)
            for i in range(len(self._priced) - 1, -1, -1):
                pool = self._priced[i]
                if i + 1 < len(self._priced):
                    after = self._priced[i + 1]
                    if (after.hourly_micros, after.offer.gpus) != (
                        pool.hourly_micros,
                        pool.offer.gpus,
                    ):
                        end = i + 1
                ends[i] = end
            self._shelf_end = ends
            self._reuse = _blocks(self._priced)
        return self._priced, self._shelf_end, self._reuse

    def growth_blocks(self, per_pod: int) -> list[_Block]:
        """The pools that may grow by nodes that hold a pod of `per_pod` GPUs, by price per node
        in blocks of one node size, the blocks by their cheapest pool when made."""
        if self._growth is None:
            self._growable.sort(key=lambda p: (p.hourly_micros, p.launch, p.name, p.seq))
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


@dataclass(frozen=True, slots=True)
class Choice:
    """An open pool for a workload: what it costs, when the workload finishes, how many nodes the
    pool grows by (0 for a reuse)."""

    cost: int
    finish: datetime
    pool: OpenPool
    extra: int = 0

    def key(self) -> tuple[int, datetime, str, int]:
        return (self.cost, self.finish, self.pool.name, self.pool.seq)


def _better(choice: Choice | None, best: Choice | None) -> Choice | None:
    if choice is None or (best is not None and best.key() <= choice.key()):
        return best
    return choice


def _reuse_one(
    pool: OpenPool, w: Workload, runtime: timedelta, finish_by: datetime | None, now: datetime
) -> Choice | None:
    """`w` in `pool` as it is: None if it does not fit or finishes too late."""
    if not pool.fits(w):
        return None
    nodes = -(-w.pods // (pool.offer.gpus // w.gpus_per_pod))
    run, _ = expected_run(pool.target, pool.offer.capacity, nodes, runtime)
    finish = max(now, pool.ready_at) + run
    if finish_by is not None and finish > finish_by:
        return None
    cost = share_cost(w.gpus, pool.offer.gpus, node_cost(pool.hourly_micros, 1, run))
    return Choice(cost, finish, pool)


def best_reuse(
    eligible: EligiblePools,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    now: datetime,
) -> Choice | None:
    """The cheapest pool `w` fits in as it is, that finishes it by `finish_by`."""
    best: Choice | None = None
    for pool in eligible.interruptible:
        best = _better(_reuse_one(pool, w, runtime, finish_by, now), best)
    gpus, per_pod = w.gpus, w.gpus_per_pod
    # No pool from here on costs less than gpus x its price per GPU x the runtime, and prices per
    # GPU only rise: compared in integers, lowered by the slack.
    lower = gpus * int(runtime.total_seconds()) * (_SLACK - 1)
    pools, shelf_end, blocks = eligible.reuse_blocks()
    at = 0
    for block in blocks:
        if block.end <= at:
            continue  # passed over with a shelf
        if block.stale:
            block.count()
        if block.free_max < per_pod or block.free_total < gpus:
            continue
        at = max(at, block.start)
        while at < block.end:
            pool = pools[at]
            hourly, offer_gpus = pool.hourly_micros, pool.offer.gpus
            if best is not None and lower * hourly > best.cost * 3600 * _SLACK * offer_gpus:
                return best
            if pool.free_total < gpus or pool.free_max < per_pod or not pool.fits(w):
                at += 1
                continue
            # The first on its shelf that fits is the one: the others cost the same and would
            # finish no sooner (or come later by name).
            at = shelf_end[at]
            finish = max(now, pool.ready_at) + runtime  # no restarts here: the run is the runtime
            if finish_by is not None and finish > finish_by:
                continue
            node_micros = node_cost(hourly, 1, runtime)
            best = _better(Choice(share_cost(gpus, offer_gpus, node_micros), finish, pool), best)
    return best


def _grow_one(
    pool: OpenPool,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    tail: timedelta,
    max_nodes: int,
    now: datetime,
) -> Choice | None:
    """`pool` grown by the nodes `w` needs: None if it fits already, would pass the node limit,
    has its offer backed off, or finishes too late."""
    if pool.unavailable or pool.nodes >= max_nodes:
        return None
    extra = pool.extra_nodes_for(w)
    if not extra or extra > max_nodes - pool.nodes:
        return None
    run, restarts = expected_run(pool.target, pool.offer.capacity, extra, runtime)
    launches = (1 + restarts) * pool.launch
    finish = now + launches + run
    if finish_by is not None and finish > finish_by:
        return None
    return Choice(node_cost(pool.hourly_micros, extra, launches + run + tail), finish, pool, extra)


def best_growth(
    eligible: EligiblePools,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    tail: timedelta,
    max_nodes: int,
    now: datetime,
) -> Choice | None:
    """The cheapest pool to grow by the nodes `w` needs: whole nodes for the launch, the run and
    the idle `tail` before teardown, finishing by `finish_by`."""
    best: Choice | None = None
    for pool in eligible.interruptible:
        best = _better(_grow_one(pool, w, runtime, finish_by, tail, max_nodes, now), best)
    fastest = eligible.fastest_launch
    if fastest is None or (finish_by is not None and now + fastest + runtime > finish_by):
        return best
    # No pool from here on costs less than one node at its price for the fastest launch, the run
    # and the tail (node_cost's own arithmetic), and prices per node only rise.
    least = int((fastest + runtime + tail).total_seconds())
    pods, per_pod = w.pods, w.gpus_per_pod
    # Of pools of one node size, price and launch time, the first that needs one node, or that
    # misses the deadline, settles the rest: none would cost less or finish sooner.
    settled: dict[int, tuple[int, timedelta]] = {}
    for block in eligible.growth_blocks(per_pod):
        if best is not None and math.ceil(block.floor * least / 3600) > best.cost:
            return best
        if not block.pools:
            continue
        if block.stale:
            block.count()
        if block.nodes_min >= max_nodes:
            continue
        if best is not None:
            # At least the nodes for the pods that its roomiest pool could not hold now.
            need = -(-(pods - block.free_total // per_pod) // (block.gpus_max // per_pod))
            if math.ceil(block.floor * max(1, need) * least / 3600) > best.cost:
                continue
        settled_hourly, settled_launch = settled.get(block.gpus_max, (-1, timedelta(0)))
        full = 0
        for pool in block.pools:
            hourly, launch = pool.hourly_micros, pool.launch
            if best is not None and math.ceil(hourly * least / 3600) > best.cost:
                break
            if hourly == settled_hourly and launch == settled_launch:
                continue
            nodes = len(pool.free)
            if nodes >= max_nodes:
                full += 1
                continue
            extra = pool.extra_nodes_for(w)
            if not extra or extra > max_nodes - nodes:
                continue
            if best is not None and math.ceil(hourly * extra * least / 3600) > best.cost:
                continue
            finish = now + launch + runtime  # no restarts here: one launch, run = runtime
            late = finish_by is not None and finish > finish_by
            if extra == 1 or late:
                settled_hourly, settled_launch = hourly, launch
            if late:
                continue
            cost = node_cost(hourly, extra, launch + runtime + tail)
            best = _better(Choice(cost, finish, pool, extra), best)
        settled[block.gpus_max] = (settled_hourly, settled_launch)
        if full:
            block.drop_full(max_nodes)
    return best
