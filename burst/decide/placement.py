"""Step 2 of the decision: placement. A workload that wants to burst goes into an open pool with free
room if one fits its policy and deadline (its policy's, or one of another policy where both share
their pools, placement.sharePools), else onto the offer with the lowest total estimated cost
(node-hours for provisioning + runtime + the idle tail before teardown; ties to the earliest
finish; with a price on waiting, each place's cost plus what its finish is worth at that price),
growing a pool of that offer before opening a new one; at the policy's pool limit only
growing is left. Every placement passes the caps (caps.py) and reserves its estimate. When no cloud
can meet the deadline any more, the soonest cloud finish counts instead, if it beats on-prem.
Which open pool to reuse or grow is reuse.py's to find; the offers to open are candidates.py's;
whether a reuse costs more than capacity of the workload's own, and the cheapest new pool, are
own.py's; what pricing would refuse anyway is refused unpriced (unpriced.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from burst.amounts import Money
from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, TargetSpec
from burst.decide.candidates import (
    Candidate,
    Candidates,
    allowed_accelerators,
)
from burst.decide.candidates import capacities as allowed_capacities
from burst.decide.caps import Caps, Rates
from burst.decide.own import OwnCapacity, dearer
from burst.decide.pools import EligiblePools, OpenPool, PolicyPools, pool_name
from burst.decide.reuse import (
    at_limit_words,
    best_at_pool_limit,
    best_drained,
    best_reuse,
    better,
)
from burst.decide.sharing import SharedPools
from burst.decide.triggers import Want, spot_allowed
from burst.decide.unpriced import LateRefusals, NoRoom, SpentBudgets, at_pool_limit, kind_of
from burst.decide.wording import Words, at, usd
from burst.model import CapacityType, Dispatch, OfferKey, Workload


class Placement:
    """The pools of one plan and the dispatches into them."""

    def __init__(
        self,
        now: datetime,
        catalog: Catalog,
        targets: Mapping[str, TargetSpec],
        candidates: Candidates,
        caps: Caps,
        unavailable: frozenset[OfferKey],
        taken: frozenset[str],
        sharing: frozenset[str] = frozenset(),
    ) -> None:
        self.now, self.catalog, self.targets = now, catalog, targets
        self.candidates, self.caps = candidates, caps
        self.unavailable, self.taken = unavailable, taken
        self.pools: list[OpenPool] = []
        self.pools_by_offer: dict[tuple[str, str, OfferKey], list[OpenPool]] = defaultdict(list)
        self.pools_of_policy: dict[str, int] = defaultdict(int)
        self.policy_pools: defaultdict[str, PolicyPools] = defaultdict(lambda: PolicyPools(now))
        self.shared = SharedPools(now, sharing, caps.rates)  # placement.sharePools
        # Per policy, its pools past their lifetime that still run work (reuse.best_at_pool_limit).
        self.draining: defaultdict[str, list[OpenPool]] = defaultdict(list)
        self.dispatches: list[Dispatch] = []
        self.refused_late, self.no_room, self.spent = LateRefusals(), NoRoom(), SpentBudgets()
        self._spot_ok: dict[str, bool] = {}
        self._max_cost: dict[tuple[str, Money | None], int | None] = {}
        # per policy: its targets, and the slowest launch among them
        self._targets_of: dict[str, tuple[list[TargetSpec], timedelta]] = {}
        self._fastest: dict[tuple[int, tuple[CapacityType, ...]], timedelta | None] = {}

    def spot_ok(self, w: Workload, policy: BurstPolicy, runtime: timedelta) -> bool:
        # Asked unpriced (NoRoom), and again when a workload is refused and placed late: its
        # policy, deadline and runtime, all that spot depends on, stay the same throughout the plan.
        found = self._spot_ok.get(w.uid)
        if found is None:
            name = policy.metadata.name
            of_policy = self._targets_of.get(name)
            if of_policy is None:  # per policy: thousands of workloads share a few policies
                names = policy.spec.placement.targets
                targets = [self.targets[t] for t in names if t in self.targets]
                slowest = max((t.provisioning for t in targets), default=timedelta(0))
                of_policy = self._targets_of[name] = (targets, slowest)
            found = self._spot_ok[w.uid] = spot_allowed(w, policy, runtime, *of_policy, self.now)
        return found

    def max_cost_usd(self, want: Want) -> int | None:
        key = (want.policy.metadata.name, want.w.max_cost)
        if key not in self._max_cost:  # the policy's cap is converted once per plan
            self._max_cost[key] = self.caps.max_cost_usd(want.w, want.policy)
        return self._max_cost[key]

    def _refusal(
        self, want: Want, cost_usd: int, max_cost_usd: int | None, offer: OfferKey, hourly: int
    ) -> str | None:
        """Why a placement costing `cost_usd` on nodes of `offer` is refused: more than the time
        it saves is worth, or a cap or budget (caps.py)."""
        if want.worth is not None and cost_usd > self.caps.rates.to_usd(want.worth):
            return f"the cloud costs {self.caps.rates.from_usd(cost_usd, want.worth.currency)}"
        hold = self.caps.budgets.hold_usd(want.w, cost_usd, offer, hourly)
        return self.caps.refusal(want.w, want.policy, cost_usd, max_cost_usd, hold)

    def open(self, pool: OpenPool) -> OpenPool:
        pool.seq = len(self.pools)
        pool.unavailable = pool.offer in self.unavailable
        self.pools.append(pool)
        if pool.drains_until is not None:  # only for work that ends before it (reuse.py)
            self.draining[pool.policy].append(pool)
            return pool
        self.pools_by_offer[(pool.policy, pool.target.name, pool.offer)].append(pool)
        self.policy_pools[pool.policy].open(pool)
        self.shared.open(pool)
        return pool

    def place(self, want: Want) -> str | None:
        """Place `want`; None on success, else the reason it was refused. A deadline no cloud can
        meet is lost either way: then the soonest cloud finish is what counts, if it beats on-prem
        (a late job stuck in the queue for days helps nobody)."""
        refusal = self.no_room.refusal(self, want.w, want.policy, want.runtime)
        if refusal is not None:
            return refusal  # what pricing it would end in, early or late, at no cost
        refusal = self._place(want)
        if refusal is None or want.w.deadline is None:
            return refusal
        soonest, onprem = self._soonest_cloud_finish(want), want.onprem.finish
        if (
            soonest is None
            or soonest <= want.w.deadline  # a cloud could make it: refused for another reason
            or (onprem is not None and soonest >= onprem)
        ):
            return refusal
        if self.refused_late.refuses(self, want):
            return refusal  # what pricing it late would end in
        late = replace(
            want,
            finish_by=soonest,
            trigger=Words(_late, want.trigger, soonest, self.now),
        )
        return refusal if self._place(late, is_late=True) is not None else None

    def _soonest_cloud_finish(
        self, want: Want, capacities: tuple[CapacityType, ...] | None = None
    ) -> datetime | None:
        """Now + the fastest provisioning of a target with an offer for `want` + its runtime."""
        caps = capacities or allowed_capacities(self.spot_ok(want.w, want.policy, want.runtime))
        shape = self.candidates.of(want.w, want.policy)
        key = (id(shape), caps)  # a shape is one object per kind of workload for the plan
        if key not in self._fastest:
            launches = [
                self.targets[n].provisioning for cap in caps for n, c in shape[cap].items() if c
            ]
            self._fastest[key] = min(launches, default=None)
        fastest = self._fastest[key]
        return None if fastest is None else self.now + fastest + want.runtime

    def _place(self, want: Want, is_late: bool = False) -> str | None:
        w, p = want.w, want.policy
        spec = p.spec
        at_limit = self.pools_of_policy[p.metadata.name] >= spec.limits.max_pools
        deadline = want.finish_by
        if at_limit and deadline is not None and self.now + want.runtime > deadline:
            return at_pool_limit(p)  # no pool ends it in time (launches, restarts: later still)
        spot_ok = self.spot_ok(w, p, want.runtime)
        max_cost_usd = self.max_cost_usd(want)
        refusals: list[str] = []
        by_capacity = self.candidates.of(w, p)
        capacities = allowed_capacities(spot_ok)

        # 1. Reuse a pool with free room, unless it would keep nodes up for this workload alone
        # for longer than capacity of its own costs (a new pool, or at the pool limit a pool
        # grown; own.py): small jobs in the room of big nodes kept whole nodes up for one of
        # their GPUs (9.5 of the 12 % idle of a Philly replay).
        per_s = per_second(self.caps.rates, w, p)
        reusable = self.eligible_pools(p, w, spot_ok, shared=True)
        reuse = best_reuse(reusable, w, want.runtime, deadline, self.now, per_s)
        draining = self.draining[p.metadata.name]
        if draining and not at_limit:  # at the limit, they may grow too (step 2)
            eligible = self.eligible_pools(p, w, spot_ok)
            reuse = better(best_drained(eligible, draining, want, self.now, per_s), reuse)
        own = OwnCapacity(
            want,
            at_limit,
            by_capacity,
            capacities,
            self.targets,
            self.unavailable,
            self.now,
            per_s,
            lambda: self.eligible_pools(p, w, spot_ok),
        )
        if reuse is not None and dearer(want, reuse, own, per_s, self.now):
            mine = own(want.runtime)
            if mine is not None and (
                self._refusal(want, mine.charge, max_cost_usd, mine.offer, mine.hourly) is None
            ):
                reuse = None
        if reuse is not None:
            pool = reuse.pool
            why = self._refusal(want, reuse.cost, max_cost_usd, pool.offer, pool.hourly_micros)
            if why is None:
                pool.place(w, reuse.finish)
                where = f"reuses pool {pool.name} with free room"
                if pool.drains_until is not None:
                    where = at_limit_words(reuse)
                if pool.policy != p.metadata.name:
                    where += f" (policy {pool.policy} shares it)"
                self._dispatch(want, pool, reuse.cost, reuse.finish, where)
                return None
            refusals.append(why)

        # 2. New capacity: the cheapest total cost, growing a pool of that offer before opening one.
        if at_limit:
            why = self._grow_at_pool_limit(want, self.eligible_pools(p, w, spot_ok), max_cost_usd)
            if why is None:
                return None
            if is_late and not refusals and why == at_pool_limit(p):  # taken by none, at any price
                self.refused_late.add(kind_of(want, spot_ok), want.runtime)
            refusals.append(why)
            return "; ".join(dict.fromkeys(refusals))
        cheapest = own.new()
        if cheapest is None:
            refusals.append(
                no_offer_reason(
                    want,
                    allowed_accelerators(p, w.accelerator, self.catalog),
                    self._soonest_cloud_finish(want, capacities),
                    [c for cap in capacities for cands in by_capacity[cap].values() for c in cands],
                    self.unavailable,
                    self.now,
                )
            )
            return "; ".join(refusals)
        _, finish, _, _, c, total = cheapest
        why = self._refusal(want, total, max_cost_usd, c.offer.key, c.offer.hourly.micros)
        if why is not None:
            refusals.append(why)
            return "; ".join(dict.fromkeys(refusals))
        into = _pool_for(self, want, c)
        into.place(w, finish)
        where = f"{c.target.name} {c.offer.instance_type} {c.offer.capacity}"
        self._dispatch(want, into, total, finish, where)
        return None

    def eligible_pools(
        self, policy: BurstPolicy, w: Workload, spot_ok: bool, shared: bool = False
    ) -> EligiblePools:
        """The policy's open pools whose target, GPU and capacity type suit `w` (of_kind); with
        `shared`, those it may reuse, of every policy sharing pools where its own does (sharing.py)."""
        found = (
            self.shared.of_kind(policy, w.accelerator, spot_ok, self.catalog) if shared else None
        )
        if found is not None:
            return found
        of_policy = self.policy_pools[policy.metadata.name]
        return of_policy.of_kind(policy, w.accelerator, spot_ok, self.catalog)

    def _grow_at_pool_limit(
        self, want: Want, eligible: EligiblePools, max_cost_usd: int | None
    ) -> str | None:
        """At the policy's pool limit only growing an open pool is left, or failing that a pool
        past its lifetime (reuse.best_at_pool_limit): the cheapest that fits."""
        draining = self.draining[want.policy.metadata.name]
        best = best_at_pool_limit(
            eligible, draining, want, self.now, per_second(self.caps.rates, want.w, want.policy)
        )
        if best is None:
            return at_pool_limit(want.policy)
        why = self._refusal(want, best.cost, max_cost_usd, best.pool.offer, best.pool.hourly_micros)
        if why is not None:
            return why
        pool = best.pool
        pool.grow(best.extra, self.now)
        pool.place(want.w, best.finish)
        self._dispatch(want, pool, best.cost, best.finish, at_limit_words(best))
        return None

    def _dispatch(
        self, want: Want, pool: OpenPool, cost: int, finish: datetime, where: str
    ) -> None:
        w, p = want.w, want.policy
        # Room was taken: those refused for room are asked again, with the prices left.
        for known in (self.refused_late, self.no_room, self.spent):
            known.clear()
        notes = self.caps.budgets.soft_overruns(w, p.metadata.name, cost)
        hold = self.caps.budgets.hold_usd(w, cost, pool.offer, pool.hourly_micros)
        self.caps.budgets.charge(w, p.metadata.name, cost, hold)
        pool.cost_micros += cost
        reason = f"{want.trigger}; {where}, est. finish {at(finish, self.now)}"
        if notes:
            reason += "; " + "; ".join(notes)
        pool.reasons.append(f"{w.namespace}/{w.name}")
        self.dispatches.append(
            Dispatch(w.uid, pool.name, pool.target.name, reason, usd(cost), finish)
        )


def _pool_for(placement: Placement, want: Want, c: Candidate) -> OpenPool:
    """An open pool of the candidate's offer that can grow to fit, else a new one."""
    limit = want.policy.spec.limits
    name = want.policy.metadata.name
    for pool in placement.pools_by_offer[(name, c.target.name, c.offer.key)]:
        extra = pool.extra_nodes_for(want.w)
        if extra is not None and extra <= limit.max_nodes_per_pool - pool.nodes:
            pool.grow(extra, placement.now)
            return pool
    placement.pools_of_policy[name] += 1
    pool = OpenPool(
        pool_name(c, placement.taken | {p.name for p in placement.pools}),
        c.target,
        name,
        c.offer.key,
        c.offer.hourly.micros,
        [c.offer.gpus] * c.nodes,
        placement.now + c.target.provisioning,
        False,
        0,
    )
    return placement.open(pool)


def _late(trigger: str | Words, soonest: datetime, now: datetime) -> str:
    return (
        f"{trigger}; no cloud meets the deadline either, the soonest cloud finish "
        f"{at(soonest, now)} beats on-prem"
    )


def no_offer_reason(
    want: Want,
    accelerators: Sequence[str],
    soonest: datetime | None,
    considered: Sequence[Candidate],
    unavailable: frozenset[OfferKey],
    now: datetime,
) -> str:
    """Why no new capacity was found: no offer at all, all out of capacity, or all too late."""
    w = want.w
    shape = f"{w.pods}x{w.gpus_per_pod} {'/'.join(accelerators)}"
    if soonest is None:
        return f"no offer with {shape} in the allowed targets within the policy's caps"
    if all(c.offer.key in unavailable for c in considered):
        return f"every offer with {shape} is out of capacity for now"
    return (
        f"no cloud offer meets the deadline {at(w.deadline, now)}: "
        f"earliest cloud finish {at(soonest, now)}"
    )


def room_finish(
    placement: Placement, w: Workload, policy: BurstPolicy, runtime: timedelta
) -> datetime | None:
    """When the open pool with room that step 1 would reuse for `w` finishes it, or None: no pool
    has room for it (by its deadline). Asked with a price on waiting, for the time that room
    saves: a pool that is up starts the run sooner than any launch."""
    spot_ok = placement.spot_ok(w, policy, runtime)
    reusable = placement.eligible_pools(policy, w, spot_ok, shared=True)
    per_s = per_second(placement.caps.rates, w, policy)
    choice = best_reuse(reusable, w, runtime, w.deadline, placement.now, per_s)
    return None if choice is None else choice.finish


def per_second(rates: Rates, w: Workload, policy: BurstPolicy) -> int:
    """USD micros a second sooner is worth to `w` at its policy's price on waiting."""
    price = policy.spec.trigger.wait_price
    if price is None:
        return 0
    return rates.to_usd(Money.of(price, policy.spec.limits.currency)) * w.gpus // 3600
