"""Refusals the placement knows without pricing a workload, each what pricing it would end in
(placement.py and the planner ask them first): no room at all for its pod shape at the policy's
pool limit (NoRoom); a hard budget over it with less left than any run of it could ask
(SpentBudgets); a late attempt of a kind refused for a shorter run (LateRefusals). A replay's
backlog under full caps and spent budgets holds thousands that each plan would otherwise price only
to refuse.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from fractions import Fraction
from itertools import chain
from typing import TYPE_CHECKING

from burst.amounts import Money
from burst.config import BurstPolicy
from burst.decide.caps import Rates
from burst.decide.triggers import Want
from burst.decide.wording import Words
from burst.model import BudgetView, Workload

if TYPE_CHECKING:
    from burst.decide.placement import Placement


def refusal(
    placement: Placement, w: Workload, policy: BurstPolicy, runtime: timedelta
) -> str | Words | None:
    """Why any placement of `w`, early or late, would be refused, where that is known without
    pricing it; None: it may be placed. Not worded as pricing words a spent budget's refusal:
    the planner asks it where no reason is asked for, or gives it as the reason."""
    return placement.no_room.refusal(placement, w, policy, runtime) or placement.spent.refusal(
        placement, w, policy, runtime
    )


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
    past their deadlines, each tried late on every plan. One of a kind refused for a shorter run is
    refused too, until the placement next takes room. At the policy's pool limit, no open pool
    taking it by the soonest cloud finish: a late attempt must finish by now + its kind's fastest
    launch + its runtime, and a pool finishes it at the pool's start + the run, so one of the same
    kind (policy, GPU and pod shape, spot allowed or not) that runs no shorter is refused too
    (best_reuse, best_growth). (Deadlines have no such order: wants are placed least slack first,
    so each has more time than the one refused before it.)
    """

    def __init__(self) -> None:
        self._shortest: dict[tuple[object, ...], timedelta] = {}

    def refuses(self, placement: Placement, want: Want) -> bool:
        spot_ok = placement.spot_ok(want.w, want.policy, want.runtime)
        shortest = self._shortest.get(kind_of(want, spot_ok))
        return shortest is not None and want.runtime >= shortest

    def add(self, kind: tuple[object, ...], runtime: timedelta) -> None:
        self._shortest[kind] = min(runtime, self._shortest.get(kind, runtime))

    def clear(self) -> None:
        """Room was taken: those refused for a shorter run are asked again."""
        if self._shortest:
            self._shortest = {}


class SpentBudgets:
    """The refusal of a workload that a hard budget over it has less left for than any placement
    of it could ask, early or late: the lowest cost of its runtime, and at least the first hold of
    a dispatch under a hard budget (money/guard.first_hold: all its GPUs for twice the horizon).
    Below the policy's pool limit a run costs at least one pod's GPUs at the lowest price per GPU
    of the offers and the policy's pools (a reuse bills all its GPUs, a new pool or a growth whole
    nodes, each holding a pod); at the limit only the policy's pools are left, and each at least
    the share of its node a reuse bills, or the nodes a growth adds. The lowest prices, and the
    most each budget may be asked, are known until the placement next takes room (a pool may
    open or fill, a budget is charged). A Philly replay with config/ held hundreds under a spent
    team budget, each priced on every plan, early and late, only to be refused for it."""

    def __init__(self) -> None:
        # Per policy and pod shape: (a run's least cost an hour, as a fraction's numerator and
        # denominator; the least first hold), in USD micros.
        self._lowest: dict[tuple[object, ...], tuple[int, int, int] | None] = {}
        self._hard: dict[tuple[str, str, str], list[BudgetView]] = {}  # budgets stay for a plan
        self._most: dict[str, int] = {}  # the most each budget may be asked, in USD micros

    def refusal(
        self, placement: Placement, w: Workload, policy: BurstPolicy, runtime: timedelta
    ) -> Words | None:
        # Asked of every waiting workload on every plan that walks the queue: most are under no
        # hard budget, and those that are share a few kinds.
        budgets, name = placement.caps.budgets, policy.metadata.name
        scope = (w.team, w.namespace, name)
        hard = self._hard.get(scope)
        if hard is None:
            hard = self._hard[scope] = [b for b in budgets.matching(w, name) if b.hard]
        if not hard:
            return None
        key = (name, w.accelerator, w.pods, w.gpus_per_pod, w.cpu_per_pod, w.memory_gib_per_pod)
        if key not in self._lowest:
            self._lowest[key] = _lowest_prices(placement, w, policy)
        lowest = self._lowest[key]
        if lowest is None:
            return None  # nowhere to run it: pricing says why
        numerator, denominator, held = lowest
        asked = max(numerator * int(runtime.total_seconds()) // (denominator * 3600), held)
        for b in hard:
            most = self._most.get(b.name)
            if most is None:  # what is left changes only when room is taken (clear())
                most = self._most[b.name] = budgets.rates.most_usd(budgets.remaining[b.name])
            if asked > most:  # worded only when read
                return Words(_spent, b.name, budgets.remaining[b.name], budgets.rates, asked)
        return None

    def clear(self) -> None:
        if self._lowest:
            self._lowest = {}
        if self._most:
            self._most = {}


def _spent(budget: str, left: Money, rates: Rates, asked: int) -> str:
    needs = rates.from_usd(asked, left.currency)
    return f"budget {budget}: {max(left, Money.zero(left.currency))} left, needs at least {needs}"


_Room = tuple[str | None, datetime | None]  # the refusal, and the latest end a drained pool allows


class NoRoom:
    """The refusal any placement of a workload gets while its policy has no room for it at all:
    at its pool limit, with no pool it may use (target, kind of GPU, spot only if it may run on
    spot) that holds it now or could grow to within its node limit (deadlines aside), but for
    pools past their lifetime, which take only runs that end before their own work
    (reuse.best_at_pool_limit). Known per policy, GPU request, spot allowed or not and pod shape
    until the placement next takes room, with the latest such end. A Philly replay with config/
    held thousands waiting at the limit, each priced on every pass only to be refused so, even
    after the last room was taken; and hundreds a pass with no slack left for spot, while the
    only room was on spot pools."""

    def __init__(self) -> None:
        self._known: dict[tuple[object, ...], tuple[_Room, _Room]] = {}
        self._full: dict[str, bool] = {}

    def refusal(
        self, placement: Placement, w: Workload, policy: BurstPolicy, runtime: timedelta
    ) -> str | None:
        name = policy.metadata.name
        if placement.pools_of_policy[name] < policy.spec.limits.max_pools:
            return None  # a new pool may take it
        key = (name, w.accelerator, w.gpus_per_pod, w.pods)
        known = self._known.get(key)
        if known is None:  # with spot allowed, and without
            known = self._known[key] = (
                _no_room(placement, w, policy, True),
                _no_room(placement, w, policy, False),
            )
        # Whether it may run on spot is asked only where the room is on spot alone.
        with_spot, without = known
        refusal, drained_by = (
            with_spot if with_spot == without or placement.spot_ok(w, policy, runtime) else without
        )
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
            self._full[name] = (
                placement.pools_of_policy[name] >= limits.max_pools
                and all(
                    pool.free_max == 0
                    and (pool.unavailable or pool.nodes >= limits.max_nodes_per_pool)
                    for pool in chain(placement.policy_pools[name].opened, placement.draining[name])
                )
                and all(pool.free_max == 0 for pool in placement.shared.foreign(name))
            )
        return self._full[name]

    def clear(self) -> None:
        if self._known:
            self._known = {}
        if self._full:
            self._full = {}


def _lowest_prices(
    placement: Placement, w: Workload, policy: BurstPolicy
) -> tuple[int, int, int] | None:
    """What the placement may take `w` with costs at least (SpentBudgets), in USD micros: an hour
    of its run, as numerator and denominator, and its first hold; None: nothing may take it."""
    found = _lowest_rates(placement, w, policy)
    if found is None:
        return None
    per_hour, per_gpu_hour = found
    ahead = int(placement.caps.budgets.ahead.total_seconds())
    held = math.floor(w.gpus * per_gpu_hour * Fraction(2 * ahead, 3600))
    return per_hour.numerator, per_hour.denominator, held


def _lowest_rates(
    placement: Placement, w: Workload, policy: BurstPolicy
) -> tuple[Fraction, Fraction] | None:
    """(the least a run of `w` costs an hour, the lowest price of a GPU-hour it may run at)."""
    limits, name = policy.spec.limits, policy.metadata.name
    pools = chain(placement.policy_pools[name].opened, placement.draining[name])
    foreign = placement.shared.foreign(name)
    if placement.pools_of_policy[name] < limits.max_pools:
        shape = placement.candidates.of(w, policy)
        prices = [
            Fraction(c.offer.hourly.micros, c.offer.gpus)
            for found in shape.values()
            for offers in found.values()
            for c in offers
        ]
        prices += [Fraction(p.hourly_micros, p.offer.gpus) for p in chain(pools, foreign)]
        per_gpu = min(prices, default=None)
        return None if per_gpu is None else (w.gpus_per_pod * per_gpu, per_gpu)
    runs: list[tuple[Fraction, Fraction]] = []
    for pool in pools:
        extra = pool.extra_nodes_for(w)
        per_gpu = Fraction(pool.hourly_micros, pool.offer.gpus)
        if extra == 0:
            runs.append((w.gpus * per_gpu, per_gpu))  # a reuse: its share of the node
        elif (
            extra is not None
            and pool.nodes + extra <= limits.max_nodes_per_pool
            and not pool.unavailable
        ):
            runs.append((Fraction(extra * pool.hourly_micros), per_gpu))  # the nodes it adds
    for pool in foreign:  # another policy's: only as it is
        if pool.extra_nodes_for(w) == 0:
            per_gpu = Fraction(pool.hourly_micros, pool.offer.gpus)
            runs.append((w.gpus * per_gpu, per_gpu))
    if not runs:
        return None
    return min(r[0] for r in runs), min(r[1] for r in runs)


def _no_room(placement: Placement, w: Workload, policy: BurstPolicy, spot_ok: bool) -> _Room:
    """At the policy's pool limit: the refusal for no room (None: there may be room), and the
    latest end of the work of a pool past its lifetime that could hold `w`, as it is or grown
    (None: none could). Only the pools `w` may use count (placement.eligible_pools): its
    policy's, and another sharing policy's that holds it now."""
    limits, name = policy.spec.limits, policy.metadata.name
    if name in placement.shared.sharing:
        shared = placement.eligible_pools(policy, w, spot_ok, shared=True)
        if any(p.policy != name and p.extra_nodes_for(w) == 0 for p in shared.pools):
            return None, None
    eligible = placement.eligible_pools(policy, w, spot_ok)
    draining = (p for p in placement.draining[name] if eligible.admits(p))
    drained_by: datetime | None = None
    for pool in chain(eligible.pools, draining):
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
