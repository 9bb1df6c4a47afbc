"""The pools that exist, as a plan starts: which to delete, and which take work in it.

Part of the decision (planner.py calls it first, and last for the idle pools the plan gave no
work; pure, no I/O). A pool idle past its policy's TTL,
past its lifetime with nothing running, or of a policy that is gone once nothing runs on it is
deleted; so is an idle one whose policy chooses its TTL against the next arrival when no work for
it is expected before a new pool could be up. The others that can still take work are opened in
the plan's Placement with their free room, and every pool the cloud may still run counts against
its policy's pool limit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, Config, TargetSpec
from burst.decide import triggers
from burst.decide.candidates import Candidates, allowed_accelerators
from burst.decide.caps import Budgets, Caps, Rates
from burst.decide.placement import Placement
from burst.decide.pools import OpenPool
from burst.decide.sharing import sharing_policies
from burst.durations import format_duration
from burst.model import DeletePool, PoolView, Snapshot, Workload
from burst.money.guard import horizon

LAUNCHING = frozenset({"requested", "creating"})
REUSABLE_STATES = LAUNCHING | {"ready"}
# Pools that count against maxPools: every one the cloud may still run (the soak saw a seventh
# pool launched while a sixth was still being deleted, with maxPools 6).
UP_STATES = REUSABLE_STATES | {"draining", "deleting"}


# The sends a policy's rate of work is read from: the last hour's (Snapshot.sent_last_hour).
SENT_WINDOW = timedelta(hours=1)

# A waiting workload, when its wait ends and sends it (triggers.wait_ends), and its policy.
WaitEnd = tuple[Workload, datetime, BurstPolicy]
# The waiting workloads' policies by uid, those of them placed in the plan, and each one's runtime.
Claims = tuple[
    Mapping[str, BurstPolicy], Collection[str], Callable[[Workload, BurstPolicy], timedelta]
]


def deletions(
    pools: Sequence[PoolView], policies: Mapping[str, BurstPolicy], now: datetime
) -> list[DeletePool]:
    """The pools to delete now, by name, each with why."""
    out = []
    for pv in sorted(pools, key=lambda p: p.name):
        if pv.state in REUSABLE_STATES:
            why = _delete_reason(pv, policies.get(pv.policy), now)
            if why:
                out.append(DeletePool(pv.name, why))
    return out


def unneeded(
    snapshot: Snapshot,
    config: Config,
    targets: Mapping[str, TargetSpec],
    kept: set[str],
    claims: Claims,
    catalog: Catalog,
    now: datetime,
) -> list[DeletePool]:
    """The idle pools of policies that choose their TTL against the next arrival to delete now,
    once the plan has placed its work: those not `kept` (deleted already, or given work in it)
    whose next work is expected later than a new pool would launch (expected_gap). Idle until
    then, their nodes would cost more than booting new ones then (a launch bills its boot, and
    needs no more nodes than the pool has); for work that comes sooner, they are kept, up to the
    TTL."""
    policy_of, placed, runtime = claims
    # Whose work a pool of a policy takes: its own, or that of every policy sharing pools where
    # its own does (placement.sharePools).
    sharing = sharing_policies(config)
    # When each waiting workload's wait ends, by the policies whose work it is: made once, for
    # any of their idle pools.
    ends: dict[frozenset[str], list[WaitEnd]] = {}
    out = []
    for pv in sorted(snapshot.pools, key=lambda p: p.name):
        policy, target = config.policies.get(pv.policy), targets.get(pv.target)
        if (
            pv.state not in REUSABLE_STATES
            or pv.idle_since is None
            or pv.name in kept
            or policy is None
            or target is None
            or policy.spec.teardown.idle_ttl_choice != "next-arrival"
        ):
            continue
        whose = sharing if pv.policy in sharing else frozenset((pv.policy,))
        if whose not in ends:
            ends[whose] = [
                (w, when, of)
                for w in snapshot.workloads
                if (of := policy_of.get(w.uid)) is not None
                and of.metadata.name in whose
                and w.uid not in placed
                if (when := triggers.wait_ends(w, of.spec.trigger, runtime(w, of))) is not None
                and when > now
            ]
        sent = sum(snapshot.sent_last_hour.get(name, 0) for name in whose)
        gap = expected_gap(pv, ends[whose], sent, catalog, now)
        launch = target.provisioning
        if gap > launch:
            why = (
                f"idle {format_duration(now - pv.idle_since)}, and its next work is expected in "
                f"{format_duration(gap)}, later than a new pool launches ({format_duration(launch)})"
            )
            out.append(DeletePool(pv.name, why))
    return out


def _delete_reason(pv: PoolView, policy: BurstPolicy | None, now: datetime) -> str | None:
    if policy is None:
        return f"policy {pv.policy} no longer exists" if pv.idle_since else None
    lifetime = policy.spec.teardown.max_lifetime
    if now - pv.created >= lifetime and pv.idle_since is not None:
        return f"max lifetime {format_duration(lifetime)} reached, and nothing runs on it"
    ttl = policy.spec.teardown.idle_ttl
    if pv.idle_since is not None and now - pv.idle_since >= ttl:
        idle = format_duration(now - pv.idle_since)
        return f"idle {idle} >= idle TTL {format_duration(ttl)}"
    return None


def expected_gap(
    pv: PoolView,
    wait_ends: Iterable[WaitEnd],
    sent_last_hour: int,
    catalog: Catalog,
    now: datetime,
) -> timedelta:
    """How long until work is expected for the idle pool `pv`: the sends of the last hour of the
    policies whose work it takes, taken as a steady rate (an hour over their number; with none,
    an hour at least), or sooner, when one of their waiting workloads that the pool's nodes could
    run (on a target and GPU its policy allows) reaches the end of its wait (`wait_ends`: each
    with when, after now, triggers.wait_ends, and its policy). One past it already and still
    waiting was refused by the plan: it keeps nothing."""
    gap = SENT_WINDOW / sent_last_hour if sent_last_hour else SENT_WINDOW
    offer = pv.offer
    for w, when, policy in wait_ends:
        if (
            w.gpus_per_pod > offer.gpus
            or pv.target not in policy.spec.placement.targets
            or (
                w.accelerator is not None
                and offer.accelerator not in allowed_accelerators(policy, w.accelerator, catalog)
            )
        ):
            continue
        gap = min(gap, when - now)
    return gap


def placement_for(
    snapshot: Snapshot,
    catalog: Catalog,
    config: Config,
    targets: Mapping[str, TargetSpec],
    deleted: set[str],
    now: datetime,
) -> Placement:
    """Where workloads may go: the existing pools that take work (not `deleted`), and room for new
    ones on `targets` (those that answer)."""
    assert config.service is not None
    spec = config.service.spec
    rates = Rates(spec.usd_rates(now))
    placement = Placement(
        now,
        catalog,
        targets,
        Candidates(catalog, targets, spec.targets, rates),
        Caps(rates, Budgets(snapshot.budgets, rates, horizon(config))),
        frozenset(snapshot.unavailable),
        frozenset(p.name for p in snapshot.pools),
        sharing_policies(config),
    )
    open_existing(placement, snapshot.pools, config.policies, targets, catalog, deleted, now)
    return placement


def expected_ready(pv: PoolView, target: TargetSpec, now: datetime) -> datetime:
    """When a pool is expected to take work: now if ready; while it launches, when_up from
    when it was asked for."""
    return when_up(pv.created, target, now) if pv.state in LAUNCHING else now


def expected_up(pv: PoolView, target: TargetSpec, now: datetime) -> list[datetime | None]:
    """Per node, when it is expected up (None: it is): the nodes a resize adds, when_up from when
    they were asked for; empty when every node is up."""
    up = pv.nodes_up
    if up is None or pv.resized_at is None or not 0 <= up < pv.nodes:
        return []
    return [None] * up + [when_up(pv.resized_at, target, now)] * (pv.nodes - up)


def when_up(asked: datetime, target: TargetSpec, now: datetime) -> datetime:
    """When nodes asked for at `asked` are expected up: the launch estimate after that; past it,
    the estimate again from now. A launch past its estimate is in the latency's heavy tail: not
    up any second (tight jobs piled onto it would be late)."""
    up = asked + target.provisioning
    return up if up > now else now + target.provisioning


def open_existing(
    placement: Placement,
    pools: Sequence[PoolView],
    policies: Mapping[str, BurstPolicy],
    targets: Mapping[str, TargetSpec],
    catalog: Catalog,
    deleted: set[str],
    now: datetime,
) -> None:
    """Count every pool the cloud may still run against its policy, and open in `placement` those
    that take work (not `deleted`); one past its lifetime takes only work that ends before its
    own, in its room (reuse.best_drained) or grown at the pool limit (best_at_pool_limit), and
    goes once idle."""
    for pv in sorted(pools, key=lambda p: p.name):
        policy = policies.get(pv.policy)
        if pv.state in UP_STATES:  # its nodes run until the cloud has deleted it: it counts
            placement.pools_of_policy[pv.policy] += 1
        if pv.state not in REUSABLE_STATES or pv.name in deleted:
            continue
        target = targets.get(pv.target)
        offer = catalog.get(pv.offer)
        hourly = pv.hourly.micros if pv.hourly else (offer.hourly.micros if offer else None)
        if target is None or hourly is None or policy is None:
            continue
        busy = list(pv.busy_until) if len(pv.busy_until) == pv.nodes else []
        ready = expected_ready(pv, target, now)
        up = expected_up(pv, target, now)
        # Nothing runs on a node not up yet: the work told as ending a runtime from now there
        # starts when it is up.
        if ready > now:
            busy = [None if b is None else b + (ready - now) for b in busy]
        elif up and busy:
            busy = [
                b if u is None or b is None else b + (u - now)
                for b, u in zip(busy, up, strict=True)
            ]
        drains_until = None
        if now - pv.created >= policy.spec.teardown.max_lifetime:
            drains_until = max((b for b in busy if b is not None), default=None)
            if drains_until is None:
                continue  # no work known to end later: it takes none
        placement.open(
            OpenPool(
                pv.name,
                target,
                pv.policy,
                pv.offer,
                hourly,
                pv.free_per_node(),
                ready,
                True,
                pv.nodes,
                pv.created,
                busy=busy,
                drains_until=drains_until,
                up=up,
            )
        )
