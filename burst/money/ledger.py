"""The ledger: the only module that writes money.

Append-only: charges from meter.py are posted once each (their key is unique: posting again, or
after a crash, adds nothing); a correction is a new row that points at the row it corrects. Money is
integer micro-units plus an ISO 4217 code, and sums across currencies are refused without explicit
rates. Budgets count posted rows plus what held reservations have not yet been charged; a hard
budget is never exceeded by a reservation, even with writers at once under any isolation level
(every reservation updates the budget's row in `budget_locks` first). Budget periods are calendar
months, ISO weeks or days in the ServiceConfig's time zone.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal
from zoneinfo import ZoneInfo

from sqlalchemy import BigInteger, ColumnElement, and_, cast, func, or_, select, update
from sqlalchemy.orm import Session

from burst.amounts import CurrencyError, Money
from burst.clock import Clock
from burst.config import Config
from burst.money.chain import append
from burst.money.meter import Charge
from burst.store.tables import BudgetLock, BudgetReservation, Dispatch, LedgerEntry, Workload

log = logging.getLogger(__name__)
Period = Literal["month", "week", "day"]
ScopeKind = Literal["team", "policy", "namespace"]


class BudgetExceeded(Exception):
    def __init__(self, budget: str, left: Money, needed: Money) -> None:
        super().__init__(f"budget {budget}: {left} left, needs {needed}")
        self.budget, self.left, self.needed = budget, left, needed


@dataclass(frozen=True)
class ChargeContext:
    """What a pool's charges carry besides the meter's numbers."""

    pool_id: int | None
    policy: str
    provider: str
    region: str
    namespaces: Mapping[str, str]  # workload uid -> namespace
    workload_ids: Mapping[str, int]  # workload uid -> workloads.id
    workload_names: Mapping[str, str] = dataclass_field(default_factory=dict)  # uid -> ns/name
    instance_type: str | None = None
    capacity: str | None = None
    zone: str | None = None
    account: str | None = None  # the AWS account, GCP project or Azure subscription billed
    # workload uid -> its policy, where it ran on a pool of another policy that shares its pools:
    # a run is spent from its own policy's budgets; the pool's idle and overhead from the pool's.
    policies: Mapping[str, str] = dataclass_field(default_factory=dict)


def post(session: Session, charges: Iterable[Charge], context: ChargeContext, clock: Clock) -> int:
    """Post charges; a charge already posted (same key) with the same amount is left as it is,
    one posted with another amount (the pool's history was learnt late) gets a correction row
    for the difference. Returns rows added."""
    charges = list(charges)
    if not charges:
        return 0
    _lock(session, LEDGER_LOCK)
    keys = [c.key for c in charges]
    posted: dict[str, LedgerEntry] = {}
    for chunk in range(0, len(keys), 500):
        posted |= {
            e.idempotency_key: e
            for e in session.scalars(
                select(LedgerEntry).where(
                    LedgerEntry.idempotency_key.in_(keys[chunk : chunk + 500])
                )
            )
        }
    now = clock.now()
    rows: list[dict[str, Any]] = []
    for c in charges:
        if c.key in posted:
            original = posted[c.key]
            booked = original.amount_micros + _corrected(session, original.id)
            if booked != c.amount_micros:
                rows.append(
                    _correction_row(
                        original,
                        c.amount_micros - booked,
                        f"remeter:{original.id}:{c.amount_micros}",
                        f"re-metered: {c.amount_micros} micro-units, {booked} booked",
                        now,
                    )
                )
            continue
        rows.append(
            {
                "idempotency_key": c.key,
                "kind": c.kind,
                "posted_at": now,
                "period_start": c.period_start,
                "period_end": c.period_end,
                "pool_id": context.pool_id,
                "pool": c.pool,
                "workload_id": context.workload_ids.get(c.workload or ""),
                "workload_uid": c.workload,
                "namespace": context.namespaces.get(c.workload or ""),
                "team": c.team,
                "policy": context.policies.get(c.workload or "", context.policy),
                "provider": context.provider,
                "region": context.region,
                "gpu_seconds": c.gpu_seconds,
                "amount_micros": c.amount_micros,
                "currency": c.currency,
                "unit_price_micros": c.unit_price_micros,
                "price_source": c.price_source,
                "workload_name": context.workload_names.get(c.workload or ""),
                "instance_type": context.instance_type,
                "capacity": context.capacity,
                "zone": context.zone,
                "account": context.account,
                "corrects_id": None,
                "note": None,
            }
        )
    return append(session, rows)


LEDGER_LOCK = "#ledger"  # not a Budget name (those are Kubernetes names): the writers' lock


def _corrected(session: Session, original_id: int) -> int:
    return int(
        session.scalar(
            select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0)).where(
                LedgerEntry.corrects_id == original_id
            )
        )
        or 0
    )


def _correction_row(
    original: LedgerEntry, delta: int, key: str, note: str, now: datetime
) -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "kind": "correction",
        "posted_at": now,
        "period_start": original.period_start,
        "period_end": original.period_end,
        "pool_id": original.pool_id,
        "pool": original.pool,
        "workload_id": original.workload_id,
        "workload_uid": original.workload_uid,
        "namespace": original.namespace,
        "team": original.team,
        "policy": original.policy,
        "provider": original.provider,
        "region": original.region,
        "gpu_seconds": 0,
        "amount_micros": delta,
        "currency": original.currency,
        "unit_price_micros": original.unit_price_micros,
        "price_source": original.price_source,
        "workload_name": original.workload_name,
        "instance_type": original.instance_type,
        "capacity": original.capacity,
        "zone": original.zone,
        "account": original.account,
        "corrects_id": original.id,
        "note": note,
    }


def correct(
    session: Session,
    original_id: int,
    delta: Money,
    note: str,
    clock: Clock,
    period: tuple[datetime, datetime] | None = None,
) -> LedgerEntry:
    """A correction row (for `delta`) pointing at `original_id`, in the original's period unless
    `period` is given (a bill's correction goes in the period it is made, so that a closed
    month's report never changes); posting the same one twice is one row."""
    original = session.get(LedgerEntry, original_id)
    if original is None:
        raise ValueError(f"no ledger row {original_id}")
    if delta.currency != original.currency:
        raise CurrencyError(f"correction in {delta.currency} of a row in {original.currency}")
    digest = hashlib.sha256(f"{original_id}:{delta.micros}:{note}".encode()).hexdigest()[:16]
    key = f"correction:{original_id}:{digest}"
    _lock(session, LEDGER_LOCK)
    if session.scalar(select(LedgerEntry.id).where(LedgerEntry.idempotency_key == key)) is None:
        values = _correction_row(original, delta.micros, key, note, clock.now())
        if period is not None:
            values["period_start"], values["period_end"] = period
        append(session, [values])
    row = session.scalar(select(LedgerEntry).where(LedgerEntry.idempotency_key == key))
    assert row is not None
    return row


def period_bounds(period: Period, now: datetime, zone: str = "UTC") -> tuple[datetime, datetime]:
    """The calendar month, ISO week or day in time zone `zone` that contains `now`, in UTC (a day
    across a daylight-saving change is 23 or 25 hours long)."""
    tz = ZoneInfo(zone)
    day = now.astimezone(tz).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    if period == "day":
        start, end = day, day + timedelta(days=1)
    elif period == "week":
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    else:
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    return start.replace(tzinfo=tz).astimezone(UTC), end.replace(tzinfo=tz).astimezone(UTC)


def convert(amounts: Mapping[str, int], currency: str, usd_rates: Mapping[str, Decimal]) -> Money:
    """Sum micro-amounts in several currencies as `currency`, through USD rates; refuse without one."""

    def rate(code: str) -> Decimal:
        if code == "USD":
            return Decimal(1)
        if code not in usd_rates:
            raise CurrencyError(f"cannot add {code} to {currency}: no exchange rate for {code}")
        return usd_rates[code]

    total = Decimal(0)
    for code, micros in amounts.items():
        total += (
            Decimal(micros) / rate(code) * rate(currency) if code != currency else Decimal(micros)
        )
    return Money(int(total.to_integral_value(ROUND_CEILING)), currency)


def _scope(column_for: ScopeKind, value: str) -> ColumnElement[bool]:
    column = {
        "team": LedgerEntry.team,
        "policy": LedgerEntry.policy,
        "namespace": LedgerEntry.namespace,
    }
    return column[column_for] == value


def spent(
    session: Session, scope: ScopeKind, value: str, start: datetime, end: datetime
) -> dict[str, int]:
    """Posted micro-amounts per currency in a scope and period (by the hour they were for)."""
    query = (
        select(LedgerEntry.currency, cast(func.sum(LedgerEntry.amount_micros), BigInteger))
        .where(
            and_(
                _scope(scope, value),
                LedgerEntry.period_start >= start,
                LedgerEntry.period_start < end,
            )
        )
        .group_by(LedgerEntry.currency)
    )
    return {currency: int(total or 0) for currency, total in session.execute(query)}


def held(session: Session, budget: str, start: datetime, end: datetime) -> dict[str, int]:
    """What the budget's reservations made in the period still hold, per currency (`held_by_run`
    added up)."""
    out: dict[str, int] = {}
    for (_, _, currency), micros in held_by_run(session, budget, start, end).items():
        out[currency] = out.get(currency, 0) + micros
    return out


def held_by_run(
    session: Session, budget: str, start: datetime, end: datetime
) -> dict[tuple[int | None, int | None, str], int]:
    """What the budget's reservations made in the period still hold, per (workload id, pool id,
    currency): what the held reservations of one workload on one pool set aside, less what that
    workload has been charged on that pool since the first of them (its spend counts once, as
    posted). A run on another pool, or an earlier run on this one posted late, takes nothing
    off: those charges are spent already, and a reservation that also subtracted them let the
    budget be passed. One statement: the charges come from a correlated subquery on the
    ledger's workload index."""
    groups = (
        select(
            BudgetReservation.workload_id,
            BudgetReservation.pool_id,
            BudgetReservation.currency,
            func.sum(BudgetReservation.amount_micros).label("amount"),
            func.min(BudgetReservation.created_at).label("since"),
        )
        .where(
            BudgetReservation.budget == budget,
            BudgetReservation.state == "held",
            BudgetReservation.created_at >= start,
            BudgetReservation.created_at < end,
        )
        .group_by(
            BudgetReservation.workload_id, BudgetReservation.pool_id, BudgetReservation.currency
        )
        .subquery()
    )
    charged = (
        select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0))
        .where(
            LedgerEntry.workload_uid == Workload.uid,
            or_(groups.c.pool_id.is_(None), LedgerEntry.pool_id == groups.c.pool_id),
            LedgerEntry.currency == groups.c.currency,
            LedgerEntry.period_end > groups.c.since,
        )
        .correlate(Workload, groups)
        .scalar_subquery()
    )
    rows = session.execute(
        select(
            groups.c.workload_id, groups.c.pool_id, groups.c.currency, groups.c.amount, charged
        ).outerjoin(Workload, Workload.id == groups.c.workload_id)
    ).all()
    return {
        (workload, pool, currency): max(0, int(amount) - int(spent_since or 0))
        for workload, pool, currency, amount, spent_since in rows
    }


@dataclass(frozen=True)
class BudgetLimit:
    name: str
    scope: ScopeKind
    value: str
    amount: Money
    period: Period
    hard: bool = True
    zone: str = "UTC"  # the time zone of its periods

    def covers(self, team: str, policy: str, namespace: str) -> bool:
        return (self.scope, self.value) in {
            ("team", team),
            ("policy", policy),
            ("namespace", namespace),
        }


def budget_limits(cfg: Config) -> list[BudgetLimit]:
    """The configured Budgets as the ledger checks them."""
    zone = cfg.service.spec.time_zone if cfg.service else "UTC"
    out = []
    for name, b in sorted(cfg.budgets.items()):
        scope = b.spec.scope
        kind: ScopeKind = "team" if scope.team else "policy" if scope.policy else "namespace"
        out.append(
            BudgetLimit(
                name,
                kind,
                scope.team or scope.policy or scope.namespace or "",
                Money.of(b.spec.amount, b.spec.currency),
                b.spec.period,
                b.spec.enforcement == "hard",
                zone,
            )
        )
    return out


def used(
    session: Session, budget: BudgetLimit, now: datetime, usd_rates: Mapping[str, Decimal]
) -> Money:
    start, end = period_bounds(budget.period, now, budget.zone)
    amounts: dict[str, int] = {}
    for part in (
        spent(session, budget.scope, budget.value, start, end),
        held(session, budget.name, start, end),
    ):
        for code, micros in part.items():
            amounts[code] = amounts.get(code, 0) + micros
    return convert(amounts, budget.amount.currency, usd_rates)


def _lock(session: Session, budget: str) -> None:
    """Serialise writers of one budget until the end of the transaction: update its row before
    reading what is left. A second writer waits for the row; under READ COMMITTED it then reads
    the first one's reservation, under REPEATABLE READ or SERIALIZABLE PostgreSQL refuses it
    (SQLSTATE 40001) and the caller tries again. SQLite's single writer does the same."""
    dialect = session.get_bind().dialect.name
    insert: Any
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    session.execute(
        insert(BudgetLock)
        .values(name=budget, version=0)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    session.execute(
        update(BudgetLock).where(BudgetLock.name == budget).values(version=BudgetLock.version + 1)
    )


def reserve(
    session: Session,
    budget: BudgetLimit,
    amount: Money,
    clock: Clock,
    usd_rates: Mapping[str, Decimal],
    *,
    pool_id: int | None = None,
    workload_id: int | None = None,
) -> BudgetReservation:
    """Hold `amount` against `budget`; a hard budget refuses what would exceed it."""
    _lock(session, budget.name)
    now = clock.now()
    needed = convert({amount.currency: amount.micros}, budget.amount.currency, usd_rates)
    left = budget.amount - used(session, budget, now, usd_rates)
    if budget.hard and needed > left:
        raise BudgetExceeded(budget.name, left, needed)
    if needed > left:
        log.warning("soft budget %s exceeded: %s left, %s reserved", budget.name, left, needed)
    row = BudgetReservation(
        budget=budget.name,
        pool_id=pool_id,
        workload_id=workload_id,
        amount_micros=amount.micros,
        currency=amount.currency,
        state="held",
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def release(session: Session, reservation_ids: Sequence[int], clock: Clock) -> int:
    """Release held reservations (their pool went; its actual spend is posted). Returns how many."""
    released = 0
    for rid in reservation_ids:
        row = session.get(BudgetReservation, rid)
        if row is not None and row.state == "held":
            row.state, row.released_at = "released", clock.now()
            released += 1
    return released


def dispatched_costs(session: Session, currency: str = "USD") -> dict[str, int]:
    """What each workload with a dispatched copy has cost so far, in one grouped query."""
    running = select(Workload.uid).where(
        Workload.id.in_(select(Dispatch.workload_id).where(Dispatch.state == "dispatched"))
    )
    query = (
        select(LedgerEntry.workload_uid, cast(func.sum(LedgerEntry.amount_micros), BigInteger))
        .where(LedgerEntry.workload_uid.in_(running), LedgerEntry.currency == currency)
        .group_by(LedgerEntry.workload_uid)
    )
    return {uid: int(total or 0) for uid, total in session.execute(query) if uid}


def workload_cost(session: Session, workload_uid: str) -> dict[str, int]:
    """What a workload has cost so far, per currency (for its `burst.dev/cost` annotation)."""
    query = (
        select(LedgerEntry.currency, cast(func.sum(LedgerEntry.amount_micros), BigInteger))
        .where(LedgerEntry.workload_uid == workload_uid)
        .group_by(LedgerEntry.currency)
    )
    return {currency: int(total or 0) for currency, total in session.execute(query)}
