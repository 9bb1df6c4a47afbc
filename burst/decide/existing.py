"""The pools that exist, as a plan starts: which to delete, and which take work in it.

Part of the decision (planner.py calls it first; pure, no I/O). A pool idle past its policy's TTL,
past its lifetime with nothing running, or of a policy that is gone once nothing runs on it is
deleted; the others that can still take work are opened in the plan's Placement with their free
room, and every pool the cloud may still run counts against its policy's pool limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, TargetSpec
from burst.decide.placement import Placement
from burst.decide.pools import OpenPool
from burst.durations import format_duration
from burst.model import DeletePool, PoolView

REUSABLE_STATES = frozenset({"requested", "creating", "ready"})
# Pools that count against maxPools: every one the cloud may still run (the soak saw a seventh
# pool launched while a sixth was still being deleted, with maxPools 6).
UP_STATES = REUSABLE_STATES | {"draining", "deleting"}


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
    that take work (not `deleted`, not past their lifetime)."""
    for pv in sorted(pools, key=lambda p: p.name):
        policy = policies.get(pv.policy)
        if pv.state in UP_STATES:  # its nodes run until the cloud has deleted it: it counts
            placement.pools_of_policy[pv.policy] += 1
        if pv.state not in REUSABLE_STATES or pv.name in deleted:
            continue
        if policy and now - pv.created >= policy.spec.teardown.max_lifetime:
            continue  # draining: past its lifetime it takes no new work, and goes once idle
        target = targets.get(pv.target)
        offer = catalog.get(pv.offer)
        hourly = pv.hourly.micros if pv.hourly else (offer.hourly.micros if offer else None)
        if target is None or hourly is None or policy is None:
            continue
        ready_at = now
        if pv.state != "ready":
            # A launch past its estimate is in the latency's heavy tail: expect it to take as
            # long again, not to be ready any second (tight jobs piled onto it would be late).
            ready_at = pv.created + target.provisioning
            if ready_at <= now:
                ready_at = now + target.provisioning
        placement.open(
            OpenPool(
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
                busy=list(pv.busy_until) if len(pv.busy_until) == pv.nodes else [],
            )
        )
