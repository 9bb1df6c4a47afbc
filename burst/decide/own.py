"""Step 2 of the decision, between its halves: capacity of a workload's own, and whether the
reuse reuse.py found costs more than it. placement.py asks before it takes a reuse, and takes the
new capacity priced here in its second half.

Capacity of its own is the cheapest new pool (`cheapest_new`), or at the policy's pool limit the
cheapest pool to grow. A reuse that keeps a node up past its pool's known work for the run alone
is charged that node time, at the node's price (`dearer`); where the runtime is learned, for a run
as long as the longest of those it is learned from too: runs past their estimates kept big nodes
up for one of their GPUs (most of a Philly replay's idle with learned estimates, and at the pool
limit, where such a reuse was taken whatever it kept up, the most of it). Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import NamedTuple

from burst.config import TargetSpec
from burst.decide.candidates import Candidate, Shape, expected_run
from burst.decide.caps import node_cost
from burst.decide.pools import EligiblePools
from burst.decide.reuse import Choice, best_growth, kept_for
from burst.decide.triggers import Want
from burst.model import CapacityType, OfferKey

# The cheapest new capacity: (total cost and the finish priced, finish, target name, offer key,
# candidate, total cost).
Cheapest = tuple[int, datetime, str, str, Candidate, int]


class Own(NamedTuple):
    """Capacity of a workload's own, priced for one run: a new pool (`new`), or at the pool limit
    a pool grown (`new` None). `total`: its cost with its wait; `charge`: its cost, that the caps
    pass; `offer` and `hourly`: its offer and price per node-hour, that the price cap passes."""

    total: int
    charge: int
    offer: OfferKey
    hourly: int
    new: Cheapest | None


def cheapest_new(
    want: Want,
    by_capacity: Shape,
    capacities: tuple[CapacityType, ...],
    targets: Mapping[str, TargetSpec],
    unavailable: frozenset[OfferKey],
    now: datetime,
    per_second: int = 0,
) -> Cheapest | None:
    """The offer with the least total cost (launches, the run and the idle tail) that finishes
    `want` by its finish_by, ties to the soonest finish. Each target's list is sorted by price x
    nodes. Where a run lasts as long on every offer (on-demand, or spot with no interruption rate)
    that is total-cost order and the first available offer is the target's best; with expected
    restarts, which grow with the nodes, the list is read on until even a run without restarts
    would cost more."""
    deadline, tail = want.finish_by, want.policy.spec.teardown.idle_ttl
    cheapest: Cheapest | None = None
    for capacity in capacities:
        for target_name, cands in by_capacity[capacity].items():
            target = targets[target_name]
            if deadline is not None and now + target.provisioning + want.runtime > deadline:
                continue
            plain = target.provisioning + want.runtime + tail
            for c in cands:
                if c.offer.key in unavailable:
                    continue
                run, restarts = expected_run(target, capacity, c.nodes, want.runtime)
                launches = (1 + restarts) * target.provisioning
                if (
                    cheapest is not None
                    and restarts
                    and cheapest[0] <= node_cost(c.offer.hourly.micros, c.nodes, plain)
                ):
                    break
                finish = now + launches + run
                if deadline is None or finish <= deadline:
                    total = node_cost(c.offer.hourly.micros, c.nodes, launches + run + tail)
                    score = total + per_second * int((finish - now).total_seconds())
                    choice = (score, finish, target_name, str(c.offer.key), c, total)
                    if cheapest is None or choice[:4] < cheapest[:4]:
                        cheapest = choice
                if not restarts:
                    break
    return cheapest


@dataclass
class OwnCapacity:
    """Capacity of one workload's own, priced for a run of a given length when first asked and
    remembered: a reuse is weighed against it, for its runtime and the longest like it, and the
    second half of the placement takes the one for its runtime (`new`)."""

    want: Want
    at_limit: bool
    by_capacity: Shape
    capacities: tuple[CapacityType, ...]
    targets: Mapping[str, TargetSpec]
    unavailable: frozenset[OfferKey]
    now: datetime
    per_second: int
    growable: Callable[[], EligiblePools]  # the policy's pools, that may grow at the limit
    _priced: dict[timedelta, Own | None] = field(default_factory=dict)

    def __call__(self, runtime: timedelta) -> Own | None:
        if runtime not in self._priced:
            self._priced[runtime] = self._price(runtime)
        return self._priced[runtime]

    def new(self) -> Cheapest | None:
        """The cheapest new pool for a run of the workload's runtime, by its finish-by."""
        own = self(self.want.runtime)
        return None if own is None else own.new

    def _price(self, runtime: timedelta) -> Own | None:
        # A run longer than the estimate is priced at any finish: only what it costs counts.
        want = self.want
        if runtime != want.runtime:
            want = replace(want, runtime=runtime, finish_by=None)
        if self.at_limit:
            spec = want.policy.spec
            grown = best_growth(
                self.growable(),
                want.w,
                runtime,
                want.finish_by,
                spec.teardown.idle_ttl,
                spec.limits.max_nodes_per_pool,
                self.now,
                self.per_second,
            )
            if grown is None:
                return None
            pool = grown.pool
            total = grown.cost + grown.waiting
            return Own(total, grown.cost, pool.offer, pool.hourly_micros, None)
        found = cheapest_new(
            want,
            self.by_capacity,
            self.capacities,
            self.targets,
            self.unavailable,
            self.now,
            self.per_second,
        )
        if found is None:
            return None
        offer = found[4].offer
        return Own(found[0], found[5], offer.key, offer.hourly.micros, found)


def dearer(
    want: Want,
    reuse: Choice,
    own: Callable[[timedelta], Own | None],
    per_second: int,
    now: datetime,
) -> bool:
    """Whether capacity of its own (`own`, priced for a run) costs less than the node time
    `reuse` keeps up past its pool's known work for the run alone, with the wait to its finish:
    for a run of its runtime, or where that is learned, of the longest run like it too."""
    runs = [want.runtime]
    longest = want.w.longest_runtime
    if longest is not None and longest > want.runtime:
        runs.append(longest)
    for runtime in runs:
        kept = reuse.kept if runtime == want.runtime else kept_for(reuse, want.w, runtime, now)
        mine = own(runtime) if kept else None
        if mine is not None:
            finish = reuse.finish + (runtime - want.runtime)
            cost = node_cost(reuse.pool.hourly_micros, 1, kept)
            if mine.total < cost + per_second * int((finish - now).total_seconds()):
                return True
    return False
