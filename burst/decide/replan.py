"""Dispatches planned onto a pool that launches late, placed again: part of the decision
(planner.py asks it before the queue is walked).

A pool's launch past its estimate is in the latency's heavy tail, and is expected to take as long
again (existing.expected_ready). A workload planned onto it that would then finish after its
deadline, or on spot under spot-if-slack with no room left for one restart before its deadline
less the margin, is at risk there: what the placement asks of a new place. Such pools take no
new work this plan; each workload at risk on one is placed again as if it wanted to burst, and
where another place finishes it by its deadline, its planned dispatch is cancelled. One no place
finishes in time stays: a lost deadline is not chased with a new pool while the late one
launches on. A dispatch still planned has no copy anywhere: moving it runs
nothing twice (the service moves a row still `planned` only, service/intents.py).

On realistic clouds a replay's missed deadlines with exact runtimes were such workloads: 0.9 h
of slack, a pool of spot nodes 44 minutes in coming (its estimate 12), and a reclaim after.

Every workload planned onto a pool still launching, late or not, is also still in the on-prem
queue until the pool is up (`holding`): a strict queue waits behind it, and a best-effort one
starts it if it fits first (onprem.queue_sweep).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from burst.config import BurstPolicy, TargetSpec
from burst.decide.existing import LAUNCHING, expected_ready
from burst.decide.firstfit import Held
from burst.decide.onprem import Estimate
from burst.decide.placement import Placement
from burst.decide.triggers import Want, safety_margin, urgency
from burst.decide.wording import Words, at
from burst.model import CancelDispatch, PoolView, Snapshot, Workload


def launching(
    planned: Sequence[Workload], snapshot: Snapshot, targets: Mapping[str, TargetSpec]
) -> Iterator[tuple[Workload, PoolView, TargetSpec]]:
    """The planned workloads whose pool still launches, each with its pool and target."""
    by_name = {p.name: p for p in snapshot.pools}
    for w in planned:
        pv = by_name.get(w.planned_pool or "")
        target = targets.get(pv.target) if pv is not None else None
        if pv is not None and target is not None and pv.state in LAUNCHING:
            yield w, pv, target


class AtRisk(NamedTuple):
    w: Workload
    policy: BurstPolicy
    runtime: timedelta
    pool: str
    ready: datetime  # when its pool is now expected to take work


def at_risk(
    planned: Sequence[Workload],
    snapshot: Snapshot,
    targets: Mapping[str, TargetSpec],
    policy_for: Callable[[Workload], BurstPolicy | None],
    runtime: Callable[[Workload, BurstPolicy], timedelta],
    now: datetime,
) -> list[AtRisk]:
    """The planned workloads at risk on a pool of `snapshot` that launches late, most urgent
    first; `policy_for` claims a workload, `runtime` gives its expected run."""
    found = []
    for w, pv, target in launching(planned, snapshot, targets):
        policy = policy_for(w)
        if w.deadline is None or policy is None:
            continue
        if pv.created + target.provisioning > now:
            continue  # launching on time: as the plan that put it there expected
        run = runtime(w, policy)
        ready = expected_ready(pv, target, now)
        # As the placement asks: a run ends by the deadline; on spot under spot-if-slack, a
        # restart too ends by the deadline less the margin.
        finish, due = ready + run, w.deadline
        if pv.offer.capacity == "spot" and policy.spec.placement.capacity == "spot-if-slack":
            finish += target.provisioning + run
            due -= safety_margin(policy.spec.trigger, run)
        if finish > due:
            found.append(AtRisk(w, policy, run, pv.name, ready))
    found.sort(key=lambda r: urgency(r.w, r.runtime, now))
    return found


def holding(
    planned: Sequence[Workload],
    snapshot: Snapshot,
    targets: Mapping[str, TargetSpec],
    policy_for: Callable[[Workload], BurstPolicy | None],
    runtime: Callable[[Workload, BurstPolicy | None], timedelta],
    now: datetime,
) -> list[Held]:
    """The planned workloads whose pool still launches, each with its run and when the pool is
    expected up: until then it is still in the on-prem queue, which the service takes it out of
    when it copies it there (onprem.queue_sweep)."""
    return [
        (w, runtime(w, policy_for(w)), expected_ready(pv, target, now))
        for w, pv, target in launching(planned, snapshot, targets)
    ]


def launch_due(
    planned: Sequence[Workload], snapshot: Snapshot, targets: Mapping[str, TargetSpec]
) -> datetime | None:
    """When the first pool still launching with work planned onto it passes its launch estimate:
    until then no workload on one is at risk (at_risk), however time passes."""
    due = [pv.created + t.provisioning for _, pv, t in launching(planned, snapshot, targets)]
    return min(due, default=None)


def replan(placement: Placement, risks: Sequence[AtRisk], now: datetime) -> list[CancelDispatch]:
    """Place each workload at risk again (its pool takes no work in `placement`); the cancels
    of the dispatches moved. One no other place finishes by its deadline stays where it was
    planned."""
    cancels = []
    for r in risks:
        why = Words(_late_pool, r.pool, r.ready, now)
        # Where it is planned takes the place of its on-prem estimate, as finishing at once: a
        # deadline lost anyway is not chased with a new pool while the late one launches on.
        stays = Estimate(None, now, now)
        want = Want(r.w, r.policy, r.runtime, stays, why, r.w.deadline)
        if placement.place(want) is None:
            cancels.append(CancelDispatch(r.w.uid, r.pool, f"placed again: {why}"))
    return cancels


def _late_pool(pool: str, ready: datetime, now: datetime) -> str:
    return f"its pool {pool} is late to launch (expected ready {at(ready, now)})"
