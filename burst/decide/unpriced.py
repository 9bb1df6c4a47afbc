"""Refusals the placement knows without pricing a workload, each exactly what pricing it would end
in (placement.py asks them first): no room at all for its pod shape at the policy's pool limit
(NoRoom); a late attempt of a kind refused for a shorter run, or under a hard budget with less
left than any run of it could cost (LateRefusals). A replay's backlog under full caps and spent
budgets holds thousands that each plan would otherwise price only to refuse.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction
from itertools import chain
from typing import TYPE_CHECKING

from burst.config import BurstPolicy
from burst.decide.candidates import capacities
from burst.decide.triggers import Want
from burst.model import Workload

if TYPE_CHECKING:
    from burst.decide.placement import Placement


def kind_of(want: Want, spot_ok: bool) -> tuple[object, ...]:
    """What LateRefusals tells workloads apart by: all that decides which open pools and which
    offers may take one (the offers, and so the lowest price, are known per policy and shape)."""
    w = want.w
    return (
        want.policy.metadata.name,
        w.accelerator,
        w.pods,
        w.gpus_per_pod,
        w.cpu_per_pod,
        w.memory_gib_per_pod,
        spot_ok,
    )


def at_pool_limit(policy: BurstPolicy) -> str:
    return f"policy {policy.metadata.name}: max {policy.spec.limits.max_pools} pools reached"


class LateRefusals:
    """Late attempts known to be refused (placement.place tries a workload late, by the soonest
    cloud finish, once no cloud meets its deadline); a Philly replay with config/ holds thousands
    past their deadlines, each tried late on every plan. Two rules, each what pricing would end in:

    - One of a kind refused for a shorter run (`dominated`), until the placement next takes room.
      At the policy's pool limit, no open pool taking it by the soonest cloud finish: a late
      attempt must finish by now + its kind's fastest launch + its runtime, and a pool finishes it
      at the pool's start + the run, so one of the same kind (policy, GPU and pod shape, spot
      allowed or not) that runs no shorter is refused too (best_reuse, best_growth). (Deadlines
      have no such order: wants are placed least slack first, so each has more time than the one
      refused before it.)
    - One a hard budget over it has less left for than any run of it could cost
      (`unaffordable`): one pod's GPUs for its runtime at the lowest price per GPU of the offers
      and the policy's pools it may use. A reuse bills all its GPUs, a new pool all its nodes, a
      growth the nodes it adds, which hold at least the pods that do not fit the pool's free room.
      The lowest price is known per kind until room is taken. The replay held hundreds under a
      spent team budget, each priced late only to be refused for it.
    """

    def __init__(self) -> None:
        self._shortest: dict[tuple[object, ...], timedelta] = {}
        self._lowest: dict[tuple[object, ...], tuple[int, int] | None] = {}

    def refuses(self, placement: Placement, want: Want) -> bool:
        spot_ok = placement.spot_ok(want)
        kind = kind_of(want, spot_ok)
        if self.dominated(kind, want.runtime):
            return True
        if kind not in self._lowest:
            self._lowest[kind] = _lowest_price(placement, want, spot_ok)
        return self.unaffordable(placement, want, self._lowest[kind])

    def dominated(self, kind: tuple[object, ...], runtime: timedelta) -> bool:
        shortest = self._shortest.get(kind)
        return shortest is not None and runtime >= shortest

    def unaffordable(self, placement: Placement, want: Want, price: tuple[int, int] | None) -> bool:
        """Whether a hard budget over `want` has less left than a run of it at `price` (a node's
        price per hour in USD micros, its GPUs), the lowest it may have, would cost."""
        w, budgets = want.w, placement.caps.budgets
        hard = [b for b in budgets.matching(w, want.policy.metadata.name) if b.hard]
        if not hard or price is None:
            return False
        lowest = w.gpus_per_pod * price[0] * int(want.runtime.total_seconds()) // (3600 * price[1])
        rates = placement.caps.rates
        return any(
            rates.from_usd(lowest, b.remaining.currency) > budgets.remaining[b.name] for b in hard
        )

    def add(self, kind: tuple[object, ...], runtime: timedelta) -> None:
        self._shortest[kind] = min(runtime, self._shortest.get(kind, runtime))

    def clear(self) -> None:
        """Room was taken: those refused for a shorter run are asked again, and the lowest price
        is looked for again (a pool may have opened)."""
        if self._shortest:
            self._shortest = {}
        if self._lowest:
            self._lowest = {}


class NoRoom:
    """The refusal any placement of a workload gets while its policy has no room for it at all:
    at its pool limit, with no pool that holds it now or could grow to within its node limit
    (deadlines and kinds of GPU aside), but for pools past their lifetime, which take only runs
    that end before their own work (reuse.best_at_pool_limit). Known per policy and pod shape until
    the placement next takes room, with the latest such end. A Philly replay with config/ held
    thousands waiting at the limit, each priced on every pass only to be refused so, even after
    the last room was taken."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], tuple[str | None, datetime | None]] = {}
        self._full: dict[str, bool] = {}

    def refusal(
        self, placement: Placement, w: Workload, policy: BurstPolicy, runtime: timedelta
    ) -> str | None:
        key = (policy.metadata.name, w.gpus_per_pod, w.pods)
        if key not in self._known:
            self._known[key] = _no_room(placement, w, policy)
        refusal, drained_by = self._known[key]
        if drained_by is not None and placement.now + runtime <= drained_by:
            return None  # a pool past its lifetime may take it
        return refusal

    def full(self, placement: Placement, policy: BurstPolicy) -> bool:
        """Whether the policy has no room for any workload: at its pool limit, no GPU free on any
        of its pools and none that may grow. While every policy claiming a waiting workload is
        full a plan places nothing and need not look at the rest of the queue (most plans of a
        Philly replay with config/)."""
        name = policy.metadata.name
        if name not in self._full:
            limits = policy.spec.limits
            self._full[name] = placement.pools_of_policy[name] >= limits.max_pools and all(
                pool.free_max == 0 and (pool.unavailable or pool.nodes >= limits.max_nodes_per_pool)
                for pool in chain(placement.policy_pools[name].opened, placement.draining[name])
            )
        return self._full[name]

    def clear(self) -> None:
        if self._known:
            self._known = {}
        if self._full:
            self._full = {}


def _lowest_price(placement: Placement, want: Want, spot_ok: bool) -> tuple[int, int] | None:
    """(node price per hour in USD micros, GPUs a node) of the lowest price per GPU."""
    shape = placement.candidates.of(want.w, want.policy)
    prices = [
        (c.offer.hourly.micros, c.offer.gpus)
        for capacity in capacities(spot_ok)
        for found in shape[capacity].values()
        for c in found
    ]
    name = want.policy.metadata.name
    prices += [
        (p.hourly_micros, p.offer.gpus)
        for p in chain(placement.policy_pools[name].opened, placement.draining[name])
    ]
    return min(prices, key=lambda price: Fraction(*price), default=None)


def _no_room(
    placement: Placement, w: Workload, policy: BurstPolicy
) -> tuple[str | None, datetime | None]:
    """The refusal for no room (None: there may be room), and the latest end of the work of a
    pool past its lifetime that could hold `w`, as it is or grown (None: none could)."""
    limits, name = policy.spec.limits, policy.metadata.name
    if placement.pools_of_policy[name] < limits.max_pools:
        return None, None
    drained_by: datetime | None = None
    for pool in chain(placement.policy_pools[name].opened, placement.draining[name]):
        extra = pool.extra_nodes_for(w)
        if extra == 0 or (
            extra is not None
            and pool.nodes + extra <= limits.max_nodes_per_pool
            and not pool.unavailable
        ):
            if pool.drains_until is None:
                return None, None
            drained_by = max(pool.drains_until, drained_by or pool.drains_until)
    return at_pool_limit(policy), drained_by
