"""Turn pool time into charges: what each closed hour of a pool cost, and who it is charged to.

Pure: `meter(pool, uses, until)` recomputes every charge from the pool's whole history, so metering
twice, in any order of events, or again after a crash, gives the same charges (ledger.py posts them
with a unique key per pool, hour, kind and workload, so nothing is counted twice or lost).

Billing follows each cloud's rule (`BILLING`): AWS Linux per second with a 60 s minimum, GCP per
second with a 1 minute minimum, Azure per minute by default. Time is split on a UTC hour grid and
an hour is charged only once it is over (or the pool is gone). Within an hour, the pool's GPU-seconds
are charged to the workloads that used them (by their GPU-seconds), to `overhead` (provisioning,
and the rounding up of short-lived nodes) and to `idle` (ready but unused; the tail before teardown).
Amounts telescope: each series' amount for an hour is floor(price x cumulative GPU-seconds) minus
the same before it, so a series' total is exactly its rounded integral.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from burst.model import Cloud

Kind = Literal["usage", "overhead", "idle"]
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class BillingRule:
    minimum_s: int  # each instance is billed at least this long
    granularity_s: int  # and in steps of this many seconds

    def billable(self, seconds: float) -> int:
        billed = max(math.ceil(seconds), self.minimum_s)
        return -(-billed // self.granularity_s) * self.granularity_s


# Each instance is billed on its own, from its launch to its end: EC2 Linux per second with a
# 60-second minimum (aws.amazon.com/ec2/pricing/on-demand/, "Per Second Billing"); Compute
# Engine per second with a one-minute minimum (cloud.google.com/compute/vm-instance-pricing,
# "Billing model"); Azure VMs per minute (azure.microsoft.com/pricing/details/virtual-machines/).
BILLING: dict[Cloud, BillingRule] = {
    "aws": BillingRule(minimum_s=60, granularity_s=1),
    "gcp": BillingRule(minimum_s=60, granularity_s=1),
    "azure": BillingRule(minimum_s=60, granularity_s=60),
}


@dataclass(frozen=True)
class PoolHistory:
    """What the meter needs of a pool: its price and how many nodes it had when."""

    pool: str
    cloud: Cloud
    team: str  # overhead and idle are charged to the policy's team
    policy: str
    unit_price_micros: int  # per node-hour
    currency: str
    price_source: str
    gpus_per_node: int
    created: datetime
    ready: datetime | None  # None: never became ready
    node_changes: tuple[tuple[datetime, int], ...]  # (when, nodes from then on), sorted or not
    deleted: datetime | None = None
    # Each instance's launch and end where the cloud reported them (None: running, or to the
    # pool's deletion); when given, billed instance by instance instead of from node_changes.
    instances: tuple[tuple[datetime, datetime | None], ...] | None = None


@dataclass(frozen=True)
class Use:
    """A workload running on the pool: `gpus` GPUs from `start` to `end` (None: still running)."""

    workload: str
    team: str
    gpus: int
    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class Charge:
    key: str
    pool: str
    kind: Kind
    workload: str | None
    team: str
    period_start: datetime
    period_end: datetime
    gpu_seconds: int
    amount_micros: int
    currency: str
    unit_price_micros: int
    price_source: str


@dataclass(frozen=True)
class _Instance:
    start: datetime
    end: datetime | None  # None: running
    billed_end: datetime | None  # end plus the rounding up of the billing rule


def instances(history: PoolHistory, rule: BillingRule) -> list[_Instance]:
    """Node instances as the cloud reported them, each billed from its launch with its own
    minimum (a reclaimed spot node and its replacement are two); else from node-count changes."""
    lifetimes = history.instances if history.instances is not None else _counted(history)
    out = []
    for start, end in lifetimes:
        end = end or history.deleted
        billed = (
            None
            if end is None
            else start + timedelta(seconds=rule.billable((end - start).total_seconds()))
        )
        out.append(_Instance(start, end, billed))
    return sorted(out, key=lambda i: (i.start, i.end or datetime.max.replace(tzinfo=UTC)))


def _counted(history: PoolHistory) -> list[tuple[datetime, datetime | None]]:
    """Instance lifetimes from node-count changes: growth launches nodes, shrinking ends the
    newest (a replacement between two looks at the count is not seen: the bill's reconciliation
    corrects it)."""
    running: list[datetime] = []
    out: list[tuple[datetime, datetime | None]] = []
    changes = sorted(history.node_changes)
    if history.deleted is not None:
        changes.append((history.deleted, 0))
    for at, nodes in changes:
        while len(running) < nodes:
            running.append(at)
        while len(running) > nodes:
            out.append((running.pop(), at))
    return out + [(start, None) for start in running]


def _overlap(a0: datetime, a1: datetime, b0: datetime, b1: datetime | None) -> float:
    end = a1 if b1 is None else min(a1, b1)
    return max(0.0, (end - max(a0, b0)).total_seconds())


def _hours(start: datetime, until: datetime) -> Iterable[tuple[datetime, datetime]]:
    t = start.replace(minute=0, second=0, microsecond=0)
    while t + HOUR <= until:
        yield t, t + HOUR
        t += HOUR


_Series = tuple[Kind, str | None, str]


def _hour(
    history: PoolHistory,
    nodes: Sequence[_Instance],
    uses: Sequence[Use],
    h0: datetime,
    h1: datetime,
) -> dict[_Series, int]:
    """Whole GPU-seconds per series in one hour, allocated moment by moment: the hour is cut
    wherever a node, the pool's readiness or a workload starts or ends, and in each piece the GPUs
    then present go to provisioning (before ready), to the workloads running (scaled down when
    they asked for more than was there, as when a spot node is lost) and the rest to idle; a
    node's billing tail after it ended is overhead. The pieces are rounded once, by largest
    remainder, so the lines add up to the hour's billed GPU-seconds exactly."""
    gpn, ready = history.gpus_per_node, history.ready
    cuts = {h0, h1}
    for inst in nodes:
        cuts.update(t for t in (inst.start, inst.end, inst.billed_end) if t is not None)
    for use in uses:
        cuts.update(t for t in (use.start, use.end) if t is not None)
    if ready is not None:
        cuts.add(ready)
    points = sorted(t for t in cuts if h0 <= t <= h1)
    exact: dict[_Series, float] = defaultdict(float)
    overhead: _Series = ("overhead", None, history.team)
    for a, b in itertools.pairwise(points):
        dt = (b - a).total_seconds()
        live = sum(1 for i in nodes if i.start <= a and (i.end is None or a < i.end)) * gpn
        tail = sum(
            1
            for i in nodes
            if i.end is not None and i.billed_end is not None and i.end <= a < i.billed_end
        )
        exact[overhead] += tail * gpn * dt
        if live == 0:
            continue
        if ready is None or a < ready:
            exact[overhead] += live * dt
            continue
        running = [u for u in uses if u.start <= a and (u.end is None or a < u.end)]
        asked = sum(u.gpus for u in running)
        share = min(1.0, live / asked) if asked else 0.0
        for u in running:
            exact[("usage", u.workload, u.team)] += u.gpus * share * dt
        exact[("idle", None, history.team)] += max(0.0, live - asked) * dt
    return _largest_remainder(exact)


def _largest_remainder(exact: dict[_Series, float]) -> dict[_Series, int]:
    """Whole numbers that add up to the rounded total, each within one of its exact value."""
    total = round(sum(exact.values()))
    floors = {k: math.floor(v) for k, v in exact.items()}
    short = total - sum(floors.values())
    for k in sorted(exact, key=lambda k: (floors[k] - exact[k], str(k)))[: max(0, short)]:
        floors[k] += 1
    return {k: v for k, v in floors.items() if v > 0}


def meter(
    history: PoolHistory, uses: Sequence[Use], until: datetime, rule: BillingRule | None = None
) -> list[Charge]:
    """Every charge of every hour of the pool that is over by `until` (pure, order-independent)."""
    rule = rule or BILLING[history.cloud]
    nodes = instances(history, rule)
    last = (
        history.deleted + timedelta(seconds=rule.minimum_s + rule.granularity_s)
        if history.deleted
        else until
    )
    horizon = min(until, last + HOUR)
    per_hour = 3600 * history.gpus_per_node  # amounts are unit_price x GPU-seconds / per_hour
    cumulative: dict[tuple[Kind, str | None], int] = defaultdict(int)
    charges: list[Charge] = []
    for h0, h1 in _hours(history.created, horizon):
        seconds = _hour(history, nodes, uses, h0, h1)
        order = {"overhead": 0, "idle": 1, "usage": 2}
        series = sorted(
            ((kind, workload, team, n) for (kind, workload, team), n in seconds.items()),
            key=lambda c: (order[c[0]], c[1] or ""),
        )
        for kind, workload, team, gpu_seconds in series:
            if gpu_seconds <= 0:
                continue
            before = cumulative[(kind, workload)]
            cumulative[(kind, workload)] = before + gpu_seconds
            price = history.unit_price_micros
            amount = price * (before + gpu_seconds) // per_hour - price * before // per_hour
            key = f"{history.pool}:{h0.strftime('%Y%m%dT%H')}:{kind}:{workload or '-'}"
            charges.append(
                Charge(
                    key,
                    history.pool,
                    kind,
                    workload,
                    team,
                    h0,
                    h1,
                    gpu_seconds,
                    amount,
                    history.currency,
                    history.unit_price_micros,
                    history.price_source,
                )
            )
    return charges
