"""The decision: which pending workloads to burst, where, on what, and why not the others.

`plan(snapshot, catalog, config, now)` is pure: no I/O, no logging, no clock; the same input gives
the same Plan. The reconcile loop (service.py) feeds it a Snapshot built by watch.py and the
ledger, and carries the Plan out through provision.py and replicate.py; `burst plan` and the
simulator call it the same way.

How it decides, in order:
1. The on-prem queue is simulated forward (onprem.py) in priority order. A burstable workload that
   a policy claims *wants* to burst when its estimated on-prem finish misses its deadline minus the
   policy's safety margin, when it has waited longer than the policy's maximum, when its namespace's
   GPU quota blocks it and the policy allows that trigger, or when no on-prem GPU group can ever
   run it. A workload that wants to burst leaves the queue, so those behind it move up.
2. Wanting workloads are placed most urgent first (least slack): into an existing or just-planned
   pool with free room if one fits the policy and the deadline, else onto the offer with the lowest
   total estimated cost (node-hours for provisioning + runtime + the idle tail before teardown),
   ties broken by the earliest finish, growing a pool of that offer before opening a new one.
   Spot capacity is used when the policy allows it, and with `spot-if-slack` only when the slack
   could absorb one interruption (a full restart); where a target knows its spot interruption
   rate, spot runs are priced and timed with their expected restarts. When no cloud can meet the
   deadline any more, the soonest cloud finish is placed instead, if it beats the on-prem estimate.
3. Caps are checked on the way: the policy's max price per node-hour, nodes per pool and pools, the
   per-job max cost, and every budget the workload falls under (hard budgets are never exceeded;
   reservations already held are in the snapshot, and each placement in this plan reserves more).
4. A workload refused in step 2 stays on-prem; the queue is simulated again with it, which may put
   others behind it at risk; they are placed in a next round.
Every pending burstable workload ends with an action or a Skip that says why, in words.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import weakref
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal

from burst.catalog import CATALOG_CURRENCY, Catalog
from burst.config import BurstPolicy, Config, TargetSpec, selector_matches
from burst.duration import format_duration
from burst.model import (
    Action,
    BudgetView,
    CancelDispatch,
    CapacityType,
    CreatePool,
    DeletePool,
    Dispatch,
    Offer,
    OfferKey,
    Plan,
    PoolView,
    ResizePool,
    Skip,
    Snapshot,
    Workload,
)
from burst.money import Money
from burst.onprem import Estimate, QueueSweep, queue_order

DEFAULT_RUNTIME = timedelta(hours=4)
MAX_ROUNDS = 4
REUSABLE_STATES = frozenset({"requested", "creating", "ready"})


class PlanError(ValueError):
    """The configuration cannot be planned with (no ServiceConfig, a missing exchange rate)."""


# --- formatting -----------------------------------------------------------------------------------


def _at(t: datetime | None, now: datetime) -> str:
    return "never" if t is None else _clock_text(t, t.date() == now.date())


@functools.lru_cache(maxsize=1 << 16)
def _clock_text(t: datetime, today: bool) -> str:
    # Cached: every plan words a reason for every pending workload, mostly with the same times.
    clock = "%H:%M:%S" if t.second else "%H:%M"
    return t.strftime(clock) if today else t.strftime(f"%Y-%m-%d {clock}")


def _usd(micros: int) -> Money:
    return Money(micros, CATALOG_CURRENCY)


# --- money ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rates:
    """Units of each currency per USD; catalog prices are USD."""

    per_usd: Mapping[str, Decimal]

    def _rate(self, currency: str) -> Decimal:
        if currency == CATALOG_CURRENCY:
            return Decimal(1)
        rate = self.per_usd.get(currency)
        if rate is None:
            raise PlanError(f"no usdExchangeRates.{currency} in the ServiceConfig")
        return rate

    def from_usd(self, micros: int, currency: str) -> Money:
        """USD to `currency`, rounded up: estimates never undershoot a cap."""
        scaled = (Decimal(micros) * self._rate(currency)).to_integral_value(ROUND_CEILING)
        return Money(int(scaled), currency)

    def to_usd(self, money: Money) -> int:
        """`money` in USD micro-units, rounded down: a cap converted never grows."""
        return int(Decimal(money.micros) / self._rate(money.currency))


def _node_cost(hourly_micros: int, nodes: int, duration: timedelta) -> int:
    return math.ceil(hourly_micros * nodes * int(duration.total_seconds()) / 3600)


# --- candidates -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    target: TargetSpec
    offer: Offer
    pods_per_node: int
    nodes: int


_Shape = dict[CapacityType, dict[str, list[_Candidate]]]
_Seen = tuple[BurstPolicy, object, "_Rates", _Shape]
_CANDIDATES: weakref.WeakKeyDictionary[Catalog, dict[tuple[object, ...], _Seen]] = (
    weakref.WeakKeyDictionary()
)


def _pods_per_node(offer: Offer, w: Workload) -> int:
    fit = offer.gpus // w.gpus_per_pod
    if w.cpu_per_pod > 0:
        fit = min(fit, int(offer.vcpus // w.cpu_per_pod))
    if w.memory_gib_per_pod > 0:
        fit = min(fit, int(offer.memory_gib // w.memory_gib_per_pod))
    return fit


def expected_run(
    target: TargetSpec, capacity: CapacityType, nodes: int, runtime: timedelta
) -> tuple[timedelta, float]:
    """Expected running time and restarts of a run of `runtime` on `nodes` nodes. On spot where the
    target's interruption rate is known, each interruption restarts the run from scratch: at m
    interruptions per hour across the nodes, it takes (e^(m T) - 1) / m with e^(m T) - 1 restarts."""
    rate = target.spot_interruptions_per_hour
    if capacity != "spot" or not rate:
        return runtime, 0.0
    per_hour = rate * nodes
    restarts = math.expm1(min(per_hour * runtime.total_seconds() / 3600, 30.0))
    return timedelta(hours=restarts / per_hour), restarts


def allowed_accelerators(policy: BurstPolicy, requested: str | None, catalog: Catalog) -> list[str]:
    """The GPUs a request may run on under `policy`: its substitutions, else itself."""
    subs = policy.spec.placement.accelerators
    if requested is None:
        merged = [a for values in subs.values() for a in values]
        return sorted(set(merged)) if merged else sorted(catalog.accelerators())
    return list(subs.get(requested, [requested]))


# --- the plan's working state ---------------------------------------------------------------------


@dataclass
class _OpenPool:
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

    def grow(self, nodes: int) -> None:
        self.free = self.free + [self.offer.gpus] * nodes
        self._refresh()

    def place(self, w: Workload) -> None:
        placed = _first_fit(self.free, w.gpus_per_pod, w.pods)
        assert placed is not None
        self.free = placed
        self.used = True
        self._refresh()

    def _refresh(self) -> None:
        self.free_max = max(self.free, default=0)
        self.free_total = sum(self.free)
        self._slots.clear()

    def __post_init__(self) -> None:
        self._refresh()


def _first_fit(free: list[int], per_pod: int, pods: int) -> list[int] | None:
    left = list(free)
    for _ in range(pods):
        for i, f in enumerate(left):
            if f >= per_pod:
                left[i] = f - per_pod
                break
        else:
            return None
    return left


@dataclass
class _Budgets:
    views: Sequence[BudgetView]
    rates: _Rates
    remaining: dict[str, Money] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.remaining = {b.name: b.remaining for b in self.views}

    def matching(self, w: Workload, policy: str) -> list[BudgetView]:
        wanted = {("team", w.team), ("policy", policy), ("namespace", w.namespace)}
        return [b for b in self.views if (b.scope, b.value) in wanted]

    def refusal(self, w: Workload, policy: str, cost_usd: int) -> str | None:
        for b in self.matching(w, policy):
            cost = self.rates.from_usd(cost_usd, b.remaining.currency)
            left = self.remaining[b.name]
            if b.hard and cost > left:
                return f"budget {b.name}: {max(left, Money.zero(left.currency))} left, needs {cost}"
        return None

    def soft_overruns(self, w: Workload, policy: str, cost_usd: int) -> list[str]:
        notes = []
        for b in self.matching(w, policy):
            cost = self.rates.from_usd(cost_usd, b.remaining.currency)
            if not b.hard and cost > self.remaining[b.name]:
                notes.append(f"soft budget {b.name} exceeded ({self.remaining[b.name]} left)")
        return notes

    def charge(self, w: Workload, policy: str, cost_usd: int) -> None:
        for b in self.matching(w, policy):
            self.remaining[b.name] -= self.rates.from_usd(cost_usd, b.remaining.currency)


@dataclass
class _Want:
    w: Workload
    policy: BurstPolicy
    runtime: timedelta
    onprem: Estimate
    trigger: str
    finish_by: datetime | None  # the deadline, or when it is lost anyway, the soonest cloud finish


class _Planner:
    def __init__(
        self, snapshot: Snapshot, catalog: Catalog, config: Config, now: datetime, explain: bool
    ) -> None:
        if config.service is None:
            raise PlanError("planning needs the ServiceConfig (targets, exchange rates)")
        self.snapshot, self.catalog, self.now, self.explain = snapshot, catalog, now, explain
        self.targets = {t.name: t for t in config.service.spec.targets}
        self.config_targets = config.service.spec.targets
        self.rates = _Rates(config.service.spec.usd_exchange_rates)
        self.policies = [config.policies[name] for name in sorted(config.policies)]
        self.budgets = _Budgets(snapshot.budgets, self.rates)
        self.unavailable = frozenset(snapshot.unavailable)
        self.shapes: dict[tuple[object, ...], _Shape] = {}
        self.pools: list[_OpenPool] = []
        self.pools_by_policy: dict[str, list[_OpenPool]] = defaultdict(list)
        self.pools_by_offer: dict[tuple[str, str, OfferKey], list[_OpenPool]] = defaultdict(list)
        self.pools_of_policy: dict[str, int] = defaultdict(int)
        self.eligible: dict[tuple[object, ...], list[_OpenPool]] = {}
        self.actions: list[Action] = []
        self.dispatches: list[Dispatch] = []
        self.skips: dict[str, Skip] = {}
        self.deleting: set[str] = set()
        self.policy_of: dict[str, BurstPolicy] = {}

    # -- matching --

    def policy_for(self, w: Workload) -> BurstPolicy | None:
        for p in self.policies:
            if selector_matches(p.spec.selector, w.namespace, w.labels):
                return p
        return None

    def runtime(self, w: Workload, policy: BurstPolicy | None) -> timedelta:
        if w.expected_runtime is not None:
            return w.expected_runtime
        return policy.spec.defaults.expected_runtime if policy else DEFAULT_RUNTIME

    # -- existing pools --

    def open_existing_pools(self) -> None:
        for pv in sorted(self.snapshot.pools, key=lambda p: p.name):
            policy = next((p for p in self.policies if p.metadata.name == pv.policy), None)
            if pv.state not in REUSABLE_STATES:
                continue
            self.pools_of_policy[pv.policy] += 1
            why = self._delete_reason(pv, policy)
            if why:
                self.deleting.add(pv.name)
                self.actions.append(DeletePool(pv.name, why))
                continue
            if policy and self.now - pv.created >= policy.spec.teardown.max_lifetime:
                continue  # draining: past its lifetime it takes no new work, and goes once idle
            target = self.targets.get(pv.target)
            offer = self.catalog.get(pv.offer)
            hourly = pv.hourly.micros if pv.hourly else (offer.hourly.micros if offer else None)
            if target is None or hourly is None or policy is None:
                continue
            ready_at = self.now
            if pv.state != "ready":
                # A launch past its estimate is in the latency's heavy tail: expect it to take as
                # long again, not to be ready any second (tight jobs piled onto it would be late).
                ready_at = pv.created + target.provisioning
                if ready_at <= self.now:
                    ready_at = self.now + target.provisioning
            self._open(
                _OpenPool(
                    pv.name,
                    target,
                    pv.policy,
                    pv.offer,
                    hourly,
                    pv.free_per_node(),
                    ready_at,
                    True,
                    pv.nodes,
                    pv.created,
                )
            )

    def _delete_reason(self, pv: PoolView, policy: BurstPolicy | None) -> str | None:
        if policy is None:
            return f"policy {pv.policy} no longer exists" if pv.idle_since else None
        lifetime = policy.spec.teardown.max_lifetime
        if self.now - pv.created >= lifetime and pv.idle_since is not None:
            return f"max lifetime {format_duration(lifetime)} reached, and nothing runs on it"
        ttl = policy.spec.teardown.idle_ttl
        if pv.idle_since is not None and self.now - pv.idle_since >= ttl:
            idle = format_duration(self.now - pv.idle_since)
            return f"idle {idle} >= idle TTL {format_duration(ttl)}"
        return None

    def _open(self, pool: _OpenPool) -> _OpenPool:
        self.pools.append(pool)
        self.pools_by_policy[pool.policy].append(pool)
        self.pools_by_offer[(pool.policy, pool.target.name, pool.offer)].append(pool)
        return pool

    # -- candidates --

    def candidates(self, want: _Want) -> _Shape:
        """Offers that can hold the workload's pods under the policy's caps, per capacity type and
        target, each list sorted by price x nodes; cached per workload shape."""
        w, p = want.w, want.policy
        key = (
            p.metadata.name,
            w.accelerator,
            w.gpus_per_pod,
            w.pods,
            w.cpu_per_pod,
            w.memory_gib_per_pod,
        )
        cached = self.shapes.get(key)
        if cached is not None:
            return cached
        # Across plans too: the candidates depend only on the catalog, the policy, the targets
        # and the rates, which a service or a simulation keeps for thousands of plans.
        across = _CANDIDATES.setdefault(self.catalog, {})
        seen = across.get(key)
        if (
            seen is not None
            and seen[0] is p
            and seen[1] is self.config_targets
            and seen[2] == self.rates
        ):
            self.shapes[key] = seen[3]
            return seen[3]
        spec = p.spec
        cap_usd = (
            self.rates.to_usd(Money.of(spec.limits.max_hourly_price, spec.limits.currency))
            if spec.limits.max_hourly_price is not None
            else None
        )
        accelerators = allowed_accelerators(p, w.accelerator, self.catalog)
        found: _Shape = {"on-demand": {}, "spot": {}}
        for name in sorted(spec.placement.targets):
            target = self.targets.get(name)
            if target is None:
                continue
            for offer in self.catalog.query(accelerators, regions={(target.cloud, target.region)}):
                if offer.gpus < w.gpus_per_pod or (
                    cap_usd is not None and offer.hourly.micros > cap_usd
                ):
                    continue
                per_node = _pods_per_node(offer, w)
                if per_node < 1:
                    continue
                nodes = -(-w.pods // per_node)
                if nodes > spec.limits.max_nodes_per_pool:
                    continue
                found[offer.capacity].setdefault(name, []).append(
                    _Candidate(target, offer, per_node, nodes)
                )
        for lists in found.values():
            for cands in lists.values():
                cands.sort(key=lambda c: (c.offer.hourly.micros * c.nodes, str(c.offer.key)))
        self.shapes[key] = found
        across[key] = (p, self.config_targets, self.rates, found)
        return found

    # -- placement --

    def place(self, want: _Want) -> str | None:
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
                f"{_at(soonest, self.now)} beats on-prem"
            ),
        )
        return refusal if self._place(late) is not None else None

    def _soonest_cloud_finish(
        self, want: _Want, capacities: tuple[CapacityType, ...] | None = None
    ) -> datetime | None:
        """Now + the fastest provisioning of a target with an offer for `want` + its runtime."""
        caps = capacities or (("on-demand", "spot") if self._spot_allowed(want) else ("on-demand",))
        shape = self.candidates(want)
        targets = [self.targets[name] for cap in caps for name, c in shape[cap].items() if c]
        if not targets:
            return None
        return self.now + min(t.provisioning for t in targets) + want.runtime

    def _place(self, want: _Want) -> str | None:
        w, p = want.w, want.policy
        spec = p.spec
        deadline = want.finish_by
        spot_ok = self._spot_allowed(want)
        max_cost_usd = self._max_cost_usd(want)
        refusals: list[str] = []

        # 1. Reuse a pool with free room.
        best_reuse: tuple[int, datetime, str, _OpenPool] | None = None
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
            cost = math.ceil(share * _node_cost(pool.hourly_micros, 1, run))
            reuse = (cost, finish, pool.name, pool)
            if best_reuse is None or reuse[:3] < best_reuse[:3]:
                best_reuse = reuse
        if best_reuse is not None:
            cost, finish, _, pool = best_reuse
            why = self._cost_refusal(want, cost, max_cost_usd)
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
        by_capacity = self.candidates(want)
        capacities: tuple[CapacityType, ...] = ("on-demand", "spot") if spot_ok else ("on-demand",)
        cheapest: tuple[int, datetime, str, str, _Candidate] | None = None
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
                        and cheapest[0] <= _node_cost(c.offer.hourly.micros, c.nodes, plain)
                    ):
                        break
                    finish = self.now + launches + run
                    if deadline is None or finish <= deadline:
                        total = _node_cost(c.offer.hourly.micros, c.nodes, launches + run + tail)
                        choice = (total, finish, target_name, str(c.offer.key), c)
                        if cheapest is None or choice[:4] < cheapest[:4]:
                            cheapest = choice
                    if not restarts:
                        break
        if cheapest is None:
            refusals.append(self._no_offer_reason(want, capacities, by_capacity))
            return "; ".join(refusals)
        total, finish, _, _, c = cheapest
        why = self._cost_refusal(want, total, max_cost_usd)
        if why is not None:
            refusals.append(why)
            return "; ".join(dict.fromkeys(refusals))
        into = self._pool_for(want, c)
        into.place(w)
        where = f"{c.target.name} {c.offer.instance_type} {c.offer.capacity}"
        self._dispatch(want, into, total, finish, where)
        return None

    def _eligible_pools(self, want: _Want, allowed: set[str], spot_ok: bool) -> list[_OpenPool]:
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
        self, want: _Want, allowed: set[str], spot_ok: bool, max_cost_usd: int | None
    ) -> str | None:
        """At the policy's pool limit only growing an open pool is left: the cheapest that fits."""
        w, spec = want.w, want.policy.spec
        best: tuple[int, datetime, str, _OpenPool, int] | None = None
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
            total = _node_cost(pool.hourly_micros, extra, billed)
            if best is None or (total, finish, pool.name) < best[:3]:
                best = (total, finish, pool.name, pool, extra)
        if best is None:
            return f"policy {want.policy.metadata.name}: max {spec.limits.max_pools} pools reached"
        total, finish, _, pool, extra = best
        why = self._cost_refusal(want, total, max_cost_usd)
        if why is not None:
            return why
        pool.grow(extra)
        pool.place(w)
        self._dispatch(want, pool, total, finish, f"grows pool {pool.name} by {extra} node(s)")
        return None

    def _spot_allowed(self, want: _Want) -> bool:
        mode = want.policy.spec.placement.capacity
        if mode == "spot":
            return True
        if mode == "on-demand":
            return False
        if want.w.deadline is None:
            return True
        # spot-if-slack: an interruption costs a restart from scratch; the slack must absorb it.
        slowest = max((t.provisioning for t in self._targets_of(want.policy)), default=timedelta(0))
        one_run = slowest + want.runtime
        return (
            self.now + 2 * one_run
            <= want.w.deadline - want.policy.spec.trigger.deadline_safety_margin
        )

    def _targets_of(self, policy: BurstPolicy) -> list[TargetSpec]:
        return [self.targets[t] for t in policy.spec.placement.targets if t in self.targets]

    def _max_cost_usd(self, want: _Want) -> int | None:
        limits = want.policy.spec.limits
        caps = []
        if limits.max_cost_per_job is not None:
            caps.append(self.rates.to_usd(Money.of(limits.max_cost_per_job, limits.currency)))
        if want.w.max_cost is not None:
            caps.append(self.rates.to_usd(want.w.max_cost))
        return min(caps) if caps else None

    def _cost_refusal(self, want: _Want, cost_usd: int, max_cost_usd: int | None) -> str | None:
        if max_cost_usd is not None and cost_usd > max_cost_usd:
            currency = want.policy.spec.limits.currency
            return (
                f"max cost {self.rates.from_usd(max_cost_usd, currency)} per job, "
                f"needs {self.rates.from_usd(cost_usd, currency)}"
            )
        return self.budgets.refusal(want.w, want.policy.metadata.name, cost_usd)

    def _no_offer_reason(
        self, want: _Want, capacities: tuple[CapacityType, ...], by_capacity: _Shape
    ) -> str:
        w, p = want.w, want.policy
        wanted = "/".join(allowed_accelerators(p, w.accelerator, self.catalog))
        shape = f"{w.pods}x{w.gpus_per_pod} {wanted}"
        finish = self._soonest_cloud_finish(want, capacities)
        if finish is None:
            return f"no offer with {shape} in the allowed targets within the policy's caps"
        considered = (c for cap in capacities for cands in by_capacity[cap].values() for c in cands)
        if all(c.offer.key in self.unavailable for c in considered):
            return f"every offer with {shape} is out of capacity for now"
        return (
            f"no cloud offer meets the deadline {_at(w.deadline, self.now)}: "
            f"earliest cloud finish {_at(finish, self.now)}"
        )

    def _pool_for(self, want: _Want, c: _Candidate) -> _OpenPool:
        """An open pool of the candidate's offer that can grow to fit, else a new one."""
        limit = want.policy.spec.limits
        name = want.policy.metadata.name
        for pool in self.pools_by_offer[(name, c.target.name, c.offer.key)]:
            extra = pool.extra_nodes_for(want.w)
            if extra is not None and extra <= limit.max_nodes_per_pool - pool.nodes:
                pool.grow(extra)
                return pool
        self.pools_of_policy[name] += 1
        pool = _OpenPool(
            self._pool_name(c),
            c.target,
            name,
            c.offer.key,
            c.offer.hourly.micros,
            [c.offer.gpus] * c.nodes,
            self.now + c.target.provisioning,
            False,
            0,
        )
        return self._open(pool)

    def _pool_name(self, c: _Candidate) -> str:
        """Deterministic: target, instance type, capacity and a generation one past any in use."""
        stem = f"{c.target.name}-{c.offer.instance_type}-{'spot' if c.offer.capacity == 'spot' else 'od'}"
        if c.offer.cloud == "gcp":
            stem += f"-{c.offer.gpus}x{c.offer.accelerator}"
        stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
        if len(stem) > 55:
            stem = stem[:46] + "-" + hashlib.sha256(stem.encode()).hexdigest()[:8]
        taken = {p.name for p in self.snapshot.pools} | {p.name for p in self.pools}
        generation = 1
        while f"{stem}-{generation}" in taken:
            generation += 1
        return f"{stem}-{generation}"

    def _dispatch(
        self, want: _Want, pool: _OpenPool, cost: int, finish: datetime, where: str
    ) -> None:
        w, p = want.w, want.policy
        notes = self.budgets.soft_overruns(w, p.metadata.name, cost)
        self.budgets.charge(w, p.metadata.name, cost)
        pool.cost_micros += cost
        reason = f"{want.trigger}; {where}, est. finish {_at(finish, self.now)}"
        if notes:
            reason += "; " + "; ".join(notes)
        pool.reasons.append(f"{w.namespace}/{w.name}")
        self.dispatches.append(
            Dispatch(w.uid, pool.name, pool.target.name, reason, _usd(cost), finish)
        )

    # -- triggers --

    def trigger(
        self, w: Workload, policy: BurstPolicy, est: Estimate, sweep: QueueSweep
    ) -> tuple[str | None, str]:
        """(why it should burst, or None; why not, for the skip)."""
        t = policy.spec.trigger
        if est.start is None:
            have = sweep.capacity(est.product)
            product = est.product or "any GPU"
            return (f"on-prem cannot run it: needs {w.gpus} {product}, on-prem has {have}", "")
        if w.deadline is not None and est.finish is not None:
            latest = w.deadline - t.deadline_safety_margin
            if est.finish > latest:
                return (
                    f"deadline at risk: est. on-prem finish {_at(est.finish, self.now)} > "
                    f"{_at(w.deadline, self.now)} - {format_duration(t.deadline_safety_margin)} "
                    "margin",
                    "",
                )
        waited = self.now - w.pending_since
        if t.max_pending_wait is not None and waited >= t.max_pending_wait:
            return (
                f"pending {format_duration(waited)} >= max wait "
                f"{format_duration(t.max_pending_wait)}",
                "",
            )
        if w.quota_blocked and t.quota_exhausted:
            return (f"GPU quota of namespace {w.namespace} exhausted", "")
        if not self.explain:
            return None, ""
        if w.deadline is not None:
            why = (
                f"deadline met on-prem: est. finish {_at(est.finish, self.now)} <= "
                f"{_at(w.deadline, self.now)} - {format_duration(t.deadline_safety_margin)} margin"
            )
        else:
            why = f"no deadline; est. on-prem start {_at(est.start, self.now)}"
            if t.max_pending_wait is not None:
                why += (
                    f", pending {format_duration(waited)} < max wait "
                    f"{format_duration(t.max_pending_wait)}"
                )
        if w.quota_blocked:
            why += f"; quota-blocked, but policy {policy.metadata.name} does not burst for quota"
        return None, why

    def urgency(self, want: _Want) -> tuple[datetime, datetime, str]:
        if want.w.deadline is None:
            return (datetime.max.replace(tzinfo=self.now.tzinfo), want.w.pending_since, want.w.uid)
        return (want.w.deadline - want.runtime, want.w.created, want.w.uid)

    # -- the whole plan --

    def run(self) -> Plan:
        self.open_existing_pools()
        pending: list[Workload] = []
        for w in self.snapshot.workloads:
            if w.phase == "started" and w.planned_pool is not None:
                self.actions.append(
                    CancelDispatch(w.uid, w.planned_pool, "started on-prem before its dispatch")
                )
            elif w.phase == "pending":
                pending.append(w)
        pending.sort(key=queue_order)
        for w in pending:
            policy = self.policy_for(w) if w.burstable else None
            if policy is not None:
                self.policy_of[w.uid] = policy
            elif w.burstable:
                self.skips[w.uid] = Skip(
                    w.uid,
                    w.namespace,
                    w.name,
                    f"no BurstPolicy claims namespace {w.namespace} with these labels",
                )
        runtimes = {w.uid: self.runtime(w, self.policy_of.get(w.uid)) for w in pending}
        stays: set[str] = set()  # refused: they wait on-prem
        placed: set[str] = set()
        for _ in range(MAX_ROUNDS):
            sweep = QueueSweep(self.snapshot.onprem, self.now)
            wants: list[_Want] = []
            for w in pending:
                est = sweep.estimate(w, runtimes[w.uid])
                policy = self.policy_of.get(w.uid)
                if w.uid in placed:
                    sweep.leave()
                    continue
                if policy is None or w.uid in stays:
                    sweep.stay(w, est)
                    continue
                why, why_not = self.trigger(w, policy, est, sweep)
                if why is None:
                    sweep.stay(w, est)
                    if self.explain:
                        self.skips[w.uid] = Skip(
                            w.uid, w.namespace, w.name, why_not, onprem_finish=est.finish
                        )
                    continue
                sweep.leave()
                wants.append(_Want(w, policy, runtimes[w.uid], est, why, w.deadline))
            if not wants:
                break
            refused = False
            for want in sorted(wants, key=self.urgency):
                refusal = self.place(want)
                w = want.w
                if refusal is None:
                    placed.add(w.uid)
                    self.skips.pop(w.uid, None)
                else:
                    refused = True
                    stays.add(w.uid)
                    self.skips[w.uid] = Skip(
                        w.uid,
                        w.namespace,
                        w.name,
                        f"{want.trigger}, but {refusal}",
                        onprem_finish=want.onprem.finish,
                    )
            if not refused:
                break  # the next round would see the same queue: those placed leave it either way
        return Plan(
            tuple(self._pool_actions() + self.dispatches + self.actions),
            tuple(sorted(self.skips.values(), key=lambda s: (s.namespace, s.name, s.workload)))
            if self.explain
            else (),
        )

    def _pool_actions(self) -> list[Action]:
        out: list[Action] = []
        for pool in self.pools:
            if not pool.used:
                continue
            who = ", ".join(pool.reasons[:3]) + (
                f" and {len(pool.reasons) - 3} more" if len(pool.reasons) > 3 else ""
            )
            if not pool.existing:
                offer = self.catalog.get(pool.offer)
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
                        _usd(pool.cost_micros),
                    )
                )
            elif pool.nodes > pool.nodes_before:
                out.append(
                    ResizePool(
                        pool.name,
                        pool.nodes,
                        f"{pool.nodes_before} -> {pool.nodes} nodes for {who}",
                        _usd(pool.cost_micros),
                    )
                )
        return out


def plan(
    snapshot: Snapshot, catalog: Catalog, config: Config, now: datetime, *, skips: bool = True
) -> Plan:
    """Decide what to burst now. Pure: same input, same Plan. `skips=False` leaves the Skips out:
    their reasons are worded for every waiting workload, which a simulation never reads."""
    return _Planner(snapshot, catalog, config, now, skips).run()
