"""Step 2 of the decision, its first half: the open pool a workload reuses, or at the policy's pool
limit grows. placement.py asks; this module finds the cheapest open pool that fits without reading
every one, so that a plan's time per workload barely grows with the number of open pools.

It reads the pools a request may use as pools.py keeps them (`EligiblePools`): for reuse by price
per GPU (a share of a node is what a reuse costs), where pools of one price and node size form a
shelf, soonest ready first, that costs a workload the same, so the first on a shelf that fits,
keeps no node up past the work known there and has no node on its way is the last to weigh on
it; for growth by price per node (whole nodes are what a growth costs), only node sizes that hold
its pods. It passes over every block of pools without the room it needs, and stops once a lower
bound of the cost of every pool still ahead is above the best found. Pools on spot where the
target knows its interruption rate are timed with restarts that depend on the pool, so no price
order bounds their cost: they are all weighed (a plan has few).

The choice is the one a scan of every eligible pool makes: the least (cost, node time kept up,
finish, name), then the pool opened first; with a price on waiting, the cost plus what the wait to
the finish is worth at it (tests/unit/test_decide_pool_index.py compares the two). Of pools of one
price, the one whose nodes the run keeps up least past their known work: room on a node whose
work outlasts the run is paid for anyway, while a run past the work on a node keeps it up for the
run alone (and room on nodes a resize adds, the run starting when they are up, often outlasts
it). Shares are integer micro-units wherever the Decimal quotient they replace is exact, so every
cost is the same to the micro-unit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, Inexact, localcontext
from typing import Any

from burst.decide.candidates import expected_run
from burst.decide.caps import node_cost
from burst.decide.pools import EligiblePools, OpenPool
from burst.decide.triggers import Want
from burst.model import Workload

# A cost's float and Decimal roundings are below a part in 2^52 of it, and pools sorted by a float
# price per GPU are out of order by no more: a bound lowered by a part in 2^50 is safe.
_SLACK = 2**50


@functools.lru_cache(maxsize=1024)
def _exact_below(gpus: int, offer_gpus: int) -> int:
    """Below what gpus x node cost the Decimal share gpus/offer_gpus x node cost has no rounding
    (the quotient terminates and the product keeps every digit); 0 when the quotient is rounded."""
    # Any: typeshed calls the flags a dict, which a compiled build (setup.py) would check them
    # against; they are a decimal.SignalDict.
    ctx: Any
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


@dataclass(frozen=True, slots=True)
class Choice:
    """An open pool for a workload: what it costs, when the workload finishes, how many nodes the
    pool grows by (0 for a reuse)."""

    cost: int
    finish: datetime
    pool: OpenPool
    extra: int = 0
    waiting: int = 0  # what the wait to its finish is worth at the policy's price on waiting
    kept: timedelta = timedelta(0)  # a reuse: the node time it adds past the work known there

    def key(self) -> tuple[int, timedelta, datetime, str, int]:
        return (self.cost + self.waiting, self.kept, self.finish, self.pool.name, self.pool.seq)


def better(choice: Choice | None, best: Choice | None) -> Choice | None:
    if choice is None or (best is not None and best.key() <= choice.key()):
        return best
    return choice


def _reuse_one(
    pool: OpenPool,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    now: datetime,
    per_second: int = 0,
) -> Choice | None:
    """`w` in `pool` as it is: None if it does not fit or finishes too late."""
    if not pool.fits(w):
        return None
    run, finish, kept = _timed(pool, w, runtime, now)
    if finish_by is not None and finish > finish_by:
        return None
    cost = share_cost(w.gpus, pool.offer.gpus, node_cost(pool.hourly_micros, 1, run))
    waiting = per_second * int((finish - now).total_seconds())
    return Choice(cost, finish, pool, waiting=waiting, kept=kept)


def kept_for(choice: Choice, w: Workload, runtime: timedelta, now: datetime) -> timedelta:
    """The node time the reuse `choice` keeps up past its pool's known work for a run of `w` of
    `runtime` (what Choice.kept is for the runtime it was found for)."""
    return _timed(choice.pool, w, runtime, now)[2]


def _timed(
    pool: OpenPool, w: Workload, runtime: timedelta, now: datetime
) -> tuple[timedelta, datetime, timedelta]:
    """A run of `runtime` of `w` in `pool`'s room: how long it takes with its restarts where the
    pool is on spot, when it ends, and the node time it keeps up past the pool's known work
    (OpenPool.timed)."""
    nodes = -(-w.pods // (pool.offer.gpus // w.gpus_per_pod))
    run, _ = expected_run(pool.target, pool.offer.capacity, nodes, runtime)
    return (run, *pool.timed(w, now, run))


def best_reuse(
    eligible: EligiblePools,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    now: datetime,
    per_second: int = 0,
) -> Choice | None:
    """The pool `w` fits in as it is, that finishes it by `finish_by`, of the least cost plus
    what the wait to its finish is worth at `per_second` (USD micros a second sooner is worth:
    a pool still launching finishes it later than one that is up)."""
    best: Choice | None = None
    for pool in eligible.interruptible:
        best = better(_reuse_one(pool, w, runtime, finish_by, now, per_second), best)
    gpus, per_pod = w.gpus, w.gpus_per_pod
    # No pool from here on costs less than gpus x its price per GPU x the runtime, and prices per
    # GPU only rise: compared in integers, lowered by the slack. None finishes before the runtime
    # is over: its wait is worth at least that much.
    seconds = int(runtime.total_seconds())
    lower = gpus * seconds * (_SLACK - 1)
    least_waiting = per_second * seconds
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
            bar = 0 if best is None else best.cost + best.waiting - least_waiting
            if best is not None and lower * hourly > bar * 3600 * _SLACK * offer_gpus:
                return best
            if pool.free_total < gpus or pool.free_max < per_pod or not pool.fits(w):
                at += 1
                continue
            choice = _reuse_one(pool, w, runtime, finish_by, now, per_second)
            best = better(choice, best)
            # Past the first on its shelf that fits with no node on its way, if it keeps no node
            # up longer or finishes too late, the others cost the same, keep no less and finish no
            # sooner (or come later by name).
            passed = not pool.up and (choice is None or not choice.kept)
            at = shelf_end[at] if passed else at + 1
    return best


def _grow_one(
    pool: OpenPool,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    tail: timedelta,
    max_nodes: int,
    now: datetime,
    per_second: int = 0,
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
    cost = node_cost(pool.hourly_micros, extra, launches + run + tail)
    return Choice(cost, finish, pool, extra, per_second * int((finish - now).total_seconds()))


def best_growth(
    eligible: EligiblePools,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    tail: timedelta,
    max_nodes: int,
    now: datetime,
    per_second: int = 0,
) -> Choice | None:
    """The cheapest pool to grow by the nodes `w` needs: whole nodes for the launch, the run and
    the idle `tail` before teardown, finishing by `finish_by`; with a price on waiting,
    `per_second`, the cost plus what the wait to its finish is worth (a pool on a target that
    launches sooner finishes it sooner)."""
    best: Choice | None = None
    for pool in eligible.interruptible:
        grown = _grow_one(pool, w, runtime, finish_by, tail, max_nodes, now, per_second)
        best = better(grown, best)
    fastest = eligible.fastest_launch
    if fastest is None or (finish_by is not None and now + fastest + runtime > finish_by):
        return best
    # No pool from here on costs less than one node at its price for the fastest launch, the run
    # and the tail (node_cost's own arithmetic), and prices per node only rise; none finishes
    # before the fastest launch and the run: its wait is worth at least that much.
    least = int((fastest + runtime + tail).total_seconds())
    least_waiting = per_second * int((fastest + runtime).total_seconds())
    bar = 0 if best is None else best.cost + best.waiting - least_waiting
    pods, per_pod = w.pods, w.gpus_per_pod
    # Of pools of one node size, price and launch time, the first that needs one node, or that
    # misses the deadline, settles the rest: none would cost less or finish sooner.
    settled: dict[int, tuple[int, timedelta]] = {}
    for block in eligible.growth_blocks(per_pod):
        if best is not None and math.ceil(block.floor * least / 3600) > bar:
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
            if math.ceil(block.floor * max(1, need) * least / 3600) > bar:
                continue
        settled_hourly, settled_launch = settled.get(block.gpus_max, (-1, timedelta(0)))
        full = 0
        for pool in block.pools:
            hourly, launch = pool.hourly_micros, pool.launch
            if best is not None and math.ceil(hourly * least / 3600) > bar:
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
            if best is not None and math.ceil(hourly * extra * least / 3600) > bar:
                continue
            finish = now + launch + runtime  # no restarts here: one launch, run = runtime
            late = finish_by is not None and finish > finish_by
            if extra == 1 or late:
                settled_hourly, settled_launch = hourly, launch
            if late:
                continue
            cost = node_cost(hourly, extra, launch + runtime + tail)
            waiting = per_second * int((finish - now).total_seconds())
            choice = Choice(cost, finish, pool, extra, waiting)
            if best is None or choice.key() < best.key():
                best, bar = choice, cost + waiting - least_waiting
        settled[block.gpus_max] = (settled_hourly, settled_launch)
        if full:
            block.drop_full(max_nodes)
    return best


def best_drained(
    eligible: EligiblePools,
    draining: list[OpenPool],
    want: Want,
    now: datetime,
    per_second: int = 0,
) -> Choice | None:
    """Of the `draining` pools, past their lifetime, the cheapest whose room takes the workload
    as it is, with its run there ending before the last of the work the pool drains: the pool
    is up that long anyway. Held to the pool limit, such room stayed idle for days: on Philly
    with learned estimates, 76,000 of a replay's 84,000 idle GPU-hours were on pools past their
    lifetime, each node kept up by one long job."""
    best = None
    for pool, by in _drained(eligible, draining, want, now):
        if pool.free_max >= want.w.gpus_per_pod:
            best = better(_reuse_one(pool, want.w, want.runtime, by, now, per_second), best)
    return best


def _drained(
    eligible: EligiblePools, draining: list[OpenPool], want: Want, now: datetime
) -> Iterator[tuple[OpenPool, datetime]]:
    """The `draining` pools that may take `want`, each with when its run there must end by: the
    last of the work the pool drains, or the workload's finish-by if sooner."""
    finish_by = want.finish_by
    for pool in draining:
        until = pool.drains_until
        if until is not None and until > now and eligible.admits(pool):
            yield pool, until if finish_by is None else min(until, finish_by)


def best_at_pool_limit(
    eligible: EligiblePools,
    draining: list[OpenPool],
    want: Want,
    now: datetime,
    per_second: int = 0,
) -> Choice | None:
    """At the pool limit: the cheapest open pool to grow for `want` (whole nodes for the launch,
    the run and the policy's idle TTL, within its node limit; with a price on waiting,
    `per_second`, the cost plus what the wait to its finish is worth); failing that, the cheapest
    of the `draining` pools, past their lifetime, that takes it as it is or grown, with its run
    there ending before the last of the work the pool drains. That keeps no pool up longer than
    its work does, and the pool's slot is held meanwhile anyway: on Philly, 56 of a policy's 64
    pools were past their lifetime, each held by one long job on one or two nodes, while a
    thousand one-GPU jobs waited."""
    w, runtime, finish_by = want.w, want.runtime, want.finish_by
    spec = want.policy.spec
    tail, max_nodes = spec.teardown.idle_ttl, spec.limits.max_nodes_per_pool
    best = best_growth(eligible, w, runtime, finish_by, tail, max_nodes, now, per_second)
    if best is not None:
        return best
    for pool, by in _drained(eligible, draining, want, now):
        choice = _reuse_one(pool, w, runtime, by, now, per_second)
        if choice is None:
            choice = _grow_one(pool, w, runtime, by, tail, max_nodes, now, per_second)
        best = better(choice, best)
    return best


def at_limit_words(choice: Choice) -> str:
    """Where a workload grown into a pool at the pool limit, or placed in one past its lifetime,
    goes, in words."""
    pool = choice.pool
    where = f"grows pool {pool.name} by {choice.extra} node(s)"
    if pool.drains_until is None:
        return where
    where = where if choice.extra else f"reuses pool {pool.name}"
    return f"{where}, past its lifetime: the run ends before the work it drains"
