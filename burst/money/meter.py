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
    """Node instances from node-count changes: growth launches nodes, shrinking ends the newest."""
    running: list[datetime] = []
    out: list[_Instance] = []
    changes = sorted(history.node_changes)
    if history.deleted is not None:
        changes.append((history.deleted, 0))
    for at, nodes in changes:
        while len(running) < nodes:
            running.append(at)
        while len(running) > nodes:
            start = running.pop()
            seconds = (at - start).total_seconds()
            out.append(_Instance(start, at, start + timedelta(seconds=rule.billable(seconds))))
    out += [_Instance(start, None, None) for start in running]
    return sorted(out, key=lambda i: (i.start, i.end or datetime.max.replace(tzinfo=UTC)))


def _overlap(a0: datetime, a1: datetime, b0: datetime, b1: datetime | None) -> float:
    end = a1 if b1 is None else min(a1, b1)
    return max(0.0, (end - max(a0, b0)).total_seconds())


def _hours(start: datetime, until: datetime) -> Iterable[tuple[datetime, datetime]]:
    t = start.replace(minute=0, second=0, microsecond=0)
    while t + HOUR <= until:
        yield t, t + HOUR
        t += HOUR


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
    ready = history.ready
    for h0, h1 in _hours(history.created, horizon):
        capacity = 0.0  # GPU-seconds the pool had this hour
        provisioning = 0.0
        rounding = 0.0
        for inst in nodes:
            seconds = _overlap(h0, h1, inst.start, inst.end)
            capacity += seconds * history.gpus_per_node
            if ready is None:
                provisioning += seconds * history.gpus_per_node
            else:
                provisioning += (
                    _overlap(h0, min(h1, ready), inst.start, inst.end) * history.gpus_per_node
                )
            if inst.end is not None and inst.billed_end is not None:
                rounding += _overlap(h0, h1, inst.end, inst.billed_end) * history.gpus_per_node
        used: dict[str, float] = defaultdict(float)
        teams: dict[str, str] = {}
        if ready is not None and capacity > 0:
            for use in sorted(uses, key=lambda u: (u.start, u.workload)):
                seconds = _overlap(max(h0, ready), h1, use.start, use.end)
                if seconds > 0:
                    used[use.workload] += seconds * use.gpus
                    teams[use.workload] = use.team
            total_used = sum(used.values())
            available = capacity - provisioning
            if (
                total_used > available > 0
            ):  # more asked than the pool had: scale down to its capacity
                used = defaultdict(float, {w: s * available / total_used for w, s in used.items()})
        idle = max(0.0, capacity - provisioning - sum(used.values()))
        series: list[tuple[Kind, str | None, str, float]] = [
            ("overhead", None, history.team, provisioning + rounding),
            ("idle", None, history.team, idle),
            *(("usage", w, teams[w], s) for w, s in sorted(used.items())),
        ]
        for kind, workload, team, gpu_seconds in series:
            seconds = round(gpu_seconds)
            if seconds <= 0:
                continue
            before = cumulative[(kind, workload)]
            cumulative[(kind, workload)] = before + seconds
            price = history.unit_price_micros
            amount = price * (before + seconds) // per_hour - price * before // per_hour
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
                    seconds,
                    amount,
                    history.currency,
                    history.unit_price_micros,
                    history.price_source,
                )
            )
    return charges
