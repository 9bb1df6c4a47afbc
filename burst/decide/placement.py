"""Step 2 of the decision: placement. A workload that wants to burst goes into an open pool with free
room if one fits its policy and deadline, else onto the offer with the lowest total estimated cost
(node-hours for provisioning + runtime + the idle tail before teardown; ties to the earliest
finish), growing a pool of that offer before opening a new one; at the policy's pool limit only
growing is left. Every placement passes the caps (caps.py) and reserves its estimate. When no cloud
can meet the deadline any more, the soonest cloud finish counts instead, if it beats on-prem.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from burst.cloud.catalog import Catalog
from burst.config import TargetSpec
from burst.decide.candidates import (
    Candidate,
    Candidates,
    allowed_accelerators,
    expected_run,
)
from burst.decide.caps import Caps, node_cost
from burst.decide.pools import OpenPool, pool_name
from burst.decide.triggers import Want, spot_allowed
from burst.decide.wording import at, usd
from burst.model import CapacityType, Dispatch, OfferKey


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
    ) -> None:
        self.now, self.catalog, self.targets = now, catalog, targets
        self.candidates, self.caps, self.unavailable, self.taken = (
            candidates,
            caps,
            unavailable,
            taken,
        )
        self.pools: list[OpenPool] = []
        self.pools_by_policy: dict[str, list[OpenPool]] = defaultdict(list)
        self.pools_by_offer: dict[tuple[str, str, OfferKey], list[OpenPool]] = defaultdict(list)
        self.pools_of_policy: dict[str, int] = defaultdict(int)
        self.eligible: dict[tuple[object, ...], list[OpenPool]] = {}
        self.dispatches: list[Dispatch] = []

    def spot_ok(self, want: Want) -> bool:
        names = want.policy.spec.placement.targets
        return spot_allowed(want, [self.targets[t] for t in names if t in self.targets], self.now)

    def open(self, pool: OpenPool) -> OpenPool:
        self.pools.append(pool)
        self.pools_by_policy[pool.policy].append(pool)
        self.pools_by_offer[(pool.policy, pool.target.name, pool.offer)].append(pool)
        return pool

    def place(self, want: Want) -> str | None:
        """Place `want`; None on success, else the reason it was refused. A deadline no cloud can
        meet is lost either way: then the soonest cloud finish is what counts, if it beats on-prem
        (a late job stuck in the queue for days helps nobody)."""
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
        late = replace(
            want,
            finish_by=soonest,
            trigger=(
                f"{want.trigger}; no cloud meets the deadline either, the soonest cloud finish "
                f"{at(soonest, self.now)} beats on-prem"
            ),
        )
        return refusal if self._place(late) is not None else None

    def _soonest_cloud_finish(
        self, want: Want, capacities: tuple[CapacityType, ...] | None = None
    ) -> datetime | None:
        """Now + the fastest provisioning of a target with an offer for `want` + its runtime."""
        caps = capacities or (("on-demand", "spot") if self.spot_ok(want) else ("on-demand",))
        shape = self.candidates.of(want.w, want.policy)
        targets = [self.targets[name] for cap in caps for name, c in shape[cap].items() if c]
        if not targets:
            return None
        return self.now + min(t.provisioning for t in targets) + want.runtime

    def _place(self, want: Want) -> str | None:
        w, p = want.w, want.policy
        spec = p.spec
        deadline = want.finish_by
        spot_ok = self.spot_ok(want)
        max_cost_usd = self.caps.max_cost_usd(want.w, want.policy)
        refusals: list[str] = []

        # 1. Reuse a pool with free room.
        best_reuse: tuple[int, datetime, str, OpenPool] | None = None
        allowed = set(allowed_accelerators(p, w.accelerator, self.catalog))
        for pool in self._eligible_pools(want, allowed, spot_ok):
            if not pool.fits(w):
                continue
            nodes = -(-w.pods // (pool.offer.gpus // w.gpus_per_pod))
            run, _ = expected_run(pool.target, pool.offer.capacity, nodes, want.runtime)
            finish = max(self.now, pool.ready_at) + run
            if deadline is not None and finish > deadline:
                continue
            share = Decimal(w.gpus) / pool.offer.gpus
            cost = math.ceil(share * node_cost(pool.hourly_micros, 1, run))
            reuse = (cost, finish, pool.name, pool)
            if best_reuse is None or reuse[:3] < best_reuse[:3]:
                best_reuse = reuse
        if best_reuse is not None:
            cost, finish, _, pool = best_reuse
            why = self.caps.refusal(want.w, want.policy, cost, max_cost_usd)
            if why is None:
                pool.place(w)
                self._dispatch(want, pool, cost, finish, f"reuses pool {pool.name} with free room")
                return None
            refusals.append(why)

        # 2. New capacity: the cheapest total cost, growing a pool of that offer before opening one.
        if self.pools_of_policy[p.metadata.name] >= spec.limits.max_pools:
            why = self._grow_at_pool_limit(want, allowed, spot_ok, max_cost_usd)
            if why is None:
                return None
            refusals.append(why)
            return "; ".join(dict.fromkeys(refusals))
        # Each target's list is sorted by price x nodes. Where a run lasts as long on every offer
        # (on-demand, or spot with no interruption rate) that is total-cost order and the first
        # available offer is the target's best; with expected restarts, which grow with the nodes,
        # the list is read on until even a run without restarts would cost more.
        by_capacity = self.candidates.of(want.w, want.policy)
        capacities: tuple[CapacityType, ...] = ("on-demand", "spot") if spot_ok else ("on-demand",)
        cheapest: tuple[int, datetime, str, str, Candidate] | None = None
        tail = spec.teardown.idle_ttl
        for capacity in capacities:
            for target_name, cands in by_capacity[capacity].items():
                target = self.targets[target_name]
                if (
                    deadline is not None
                    and self.now + target.provisioning + want.runtime > deadline
                ):
                    continue
                plain = target.provisioning + want.runtime + tail
                for c in cands:
                    if c.offer.key in self.unavailable:
                        continue
                    run, restarts = expected_run(target, capacity, c.nodes, want.runtime)
                    launches = (1 + restarts) * target.provisioning
                    if (
                        cheapest is not None
                        and restarts
                        and cheapest[0] <= node_cost(c.offer.hourly.micros, c.nodes, plain)
                    ):
                        break
                    finish = self.now + launches + run
                    if deadline is None or finish <= deadline:
                        total = node_cost(c.offer.hourly.micros, c.nodes, launches + run + tail)
                        choice = (total, finish, target_name, str(c.offer.key), c)
                        if cheapest is None or choice[:4] < cheapest[:4]:
                            cheapest = choice
                    if not restarts:
                        break
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
        total, finish, _, _, c = cheapest
        why = self.caps.refusal(want.w, want.policy, total, max_cost_usd)
        if why is not None:
            refusals.append(why)
            return "; ".join(dict.fromkeys(refusals))
        into = self._pool_for(want, c)
        into.place(w)
        where = f"{c.target.name} {c.offer.instance_type} {c.offer.capacity}"
        self._dispatch(want, into, total, finish, where)
        return None

    def _eligible_pools(self, want: Want, allowed: set[str], spot_ok: bool) -> list[OpenPool]:
        """The policy's open pools whose target, GPU and capacity type suit `want`.

        Cached per (policy, GPU request, spot allowed) until a pool opens: the decision asks this
        for every workload, and most share these three.
        """
        policy = want.policy
        key = (policy.metadata.name, want.w.accelerator, spot_ok, len(self.pools))
        found = self.eligible.get(key)
        if found is None:
            found = [
                pool
                for pool in self.pools_by_policy[policy.metadata.name]
                if pool.target.name in policy.spec.placement.targets
                and pool.offer.accelerator in allowed
                and (spot_ok or pool.offer.capacity != "spot")
            ]
            self.eligible[key] = found
        return found

    def _grow_at_pool_limit(
        self, want: Want, allowed: set[str], spot_ok: bool, max_cost_usd: int | None
    ) -> str | None:
        """At the policy's pool limit only growing an open pool is left: the cheapest that fits."""
        w, spec = want.w, want.policy.spec
        best: tuple[int, datetime, str, OpenPool, int] | None = None
        for pool in self._eligible_pools(want, allowed, spot_ok):
            if pool.offer in self.unavailable or pool.nodes >= spec.limits.max_nodes_per_pool:
                continue
            extra = pool.extra_nodes_for(w)
            if not extra or extra > spec.limits.max_nodes_per_pool - pool.nodes:
                continue
            run, restarts = expected_run(pool.target, pool.offer.capacity, extra, want.runtime)
            launches = (1 + restarts) * pool.target.provisioning
            finish = self.now + launches + run
            if want.finish_by is not None and finish > want.finish_by:
                continue
            billed = launches + run + spec.teardown.idle_ttl
            total = node_cost(pool.hourly_micros, extra, billed)
            if best is None or (total, finish, pool.name) < best[:3]:
                best = (total, finish, pool.name, pool, extra)
        if best is None:
            return f"policy {want.policy.metadata.name}: max {spec.limits.max_pools} pools reached"
        total, finish, _, pool, extra = best
        why = self.caps.refusal(want.w, want.policy, total, max_cost_usd)
        if why is not None:
            return why
        pool.grow(extra)
        pool.place(w)
        self._dispatch(want, pool, total, finish, f"grows pool {pool.name} by {extra} node(s)")
        return None

    def _pool_for(self, want: Want, c: Candidate) -> OpenPool:
        """An open pool of the candidate's offer that can grow to fit, else a new one."""
        limit = want.policy.spec.limits
        name = want.policy.metadata.name
        for pool in self.pools_by_offer[(name, c.target.name, c.offer.key)]:
            extra = pool.extra_nodes_for(want.w)
            if extra is not None and extra <= limit.max_nodes_per_pool - pool.nodes:
                pool.grow(extra)
                return pool
        self.pools_of_policy[name] += 1
        pool = OpenPool(
            pool_name(c, self.taken | {p.name for p in self.pools}),
            c.target,
            name,
            c.offer.key,
            c.offer.hourly.micros,
            [c.offer.gpus] * c.nodes,
            self.now + c.target.provisioning,
            False,
            0,
        )
        return self.open(pool)

    def _dispatch(
        self, want: Want, pool: OpenPool, cost: int, finish: datetime, where: str
    ) -> None:
        w, p = want.w, want.policy
        notes = self.caps.budgets.soft_overruns(w, p.metadata.name, cost)
        self.caps.budgets.charge(w, p.metadata.name, cost)
        pool.cost_micros += cost
        reason = f"{want.trigger}; {where}, est. finish {at(finish, self.now)}"
        if notes:
            reason += "; " + "; ".join(notes)
        pool.reasons.append(f"{w.namespace}/{w.name}")
        self.dispatches.append(
            Dispatch(w.uid, pool.name, pool.target.name, reason, usd(cost), finish)
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
