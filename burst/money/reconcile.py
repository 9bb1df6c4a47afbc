"""Reconcile the ledger with a cloud bill (bills.py reads it): match each pool's billed spans with
what the ledger posted for them, correct the differences, and report the rest.

A pool's span (an hour, or a day for daily bills) costs what its usage, discount and credit
lines add up to; tax, refunds, fees and lines of no pool are totalled by type beside it, never
booked on a job. A difference is spread over the span's ledger rows in proportion to their
amounts (largest remainder), each share a correction pointing at its row, posted in the period
the reconciliation runs in, so a report of a month finance has closed never changes; the rows
they correct count them when the span is matched again, so a second run finds it matched.
Both directions are reported: spans the bill has and the ledger lacks, and ledger hours within
the days the bill covers that it does not mention. A bill in another currency than the
ledger is converted at the ServiceConfig's rate of each line's date, which the outcome states,
or refused.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import BigInteger, cast, func, select
from sqlalchemy.orm import Session

from burst.amounts import CurrencyError, Money
from burst.clock import Clock
from burst.money.bills import POOL_COST, BillLine
from burst.money.ledger import convert, correct
from burst.store.tables import LedgerEntry

TOLERANCE_MICROS = 10_000  # a cent: bills round, the ledger does not

Span = tuple[str, datetime, datetime]  # pool, start, end (exclusive)


@dataclass
class Outcome:
    matched: list[tuple[Span, Money]] = field(default_factory=list)
    differs: list[tuple[Span, Money, Money]] = field(default_factory=list)  # bill, ledger
    missing_from_ledger: list[tuple[Span, Money]] = field(default_factory=list)
    missing_from_bill: list[tuple[Span, Money]] = field(default_factory=list)
    beside: list[tuple[str, Money]] = field(default_factory=list)  # (type, total): tax, refund, ...
    unknown: list[BillLine] = field(default_factory=list)  # costs of no pool burst knows
    corrections: int = 0
    rates: dict[str, list[Decimal]] = field(default_factory=dict)  # units per USD, those used


def spread(total: int, weights: Sequence[int]) -> list[int]:
    """`total` in parts proportional to `weights` (equal when they are all 0), whole numbers
    that add up to it exactly (largest remainder; pure)."""
    if not weights:
        return []
    base = [abs(w) for w in weights] if any(weights) else [1] * len(weights)
    whole = sum(base)
    exact = [Decimal(total) * w / whole for w in base]
    parts = [int(e) for e in exact]  # towards zero
    short = total - sum(parts)
    step = 1 if short > 0 else -1
    order = sorted(range(len(exact)), key=lambda i: -abs(exact[i] - parts[i]))
    for i in order[: abs(short)]:
        parts[i] += step
    return parts


def reconcile(
    session: Session,
    lines: Iterable[BillLine],
    clock: Clock,
    rates_at: Callable[[datetime], Mapping[str, Decimal]] = lambda _: {},
) -> Outcome:
    """Match the bill's pool lines with the ledger; a line in another currency is converted at
    the rate of its own date (`rates_at`, units per USD)."""
    outcome = Outcome()
    known = {
        pool: currency
        for pool, currency in session.execute(
            select(LedgerEntry.pool, LedgerEntry.currency).distinct()
        )
        if pool
    }
    billed: dict[Span, int] = defaultdict(int)  # in the pool's ledger currency
    beside: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    first: datetime | None = None
    last: datetime | None = None
    for line in lines:
        first = line.start if first is None else min(first, line.start)
        last = line.end if last is None else max(last, line.end)
        if line.pool in known and line.type in POOL_COST:
            ledger_currency = known[line.pool]
            amount = line.amount
            if amount.currency != ledger_currency:
                amount = _convert(amount, ledger_currency, rates_at(line.start), outcome)
            billed[(line.pool, line.start, line.end)] += amount.micros
        elif line.type in POOL_COST:
            outcome.unknown.append(line)
        else:
            beside[line.type][line.amount.currency] += line.amount.micros
    outcome.beside = [
        (kind, Money(micros, currency))
        for kind, amounts in sorted(beside.items())
        for currency, micros in sorted(amounts.items())
    ]
    now = clock.now().replace(minute=0, second=0, microsecond=0)
    for span, micros in sorted(billed.items()):
        pool, start, end = span
        bill = Money(micros, known[pool])
        rows = list(
            session.scalars(
                select(LedgerEntry)
                .where(
                    LedgerEntry.pool == pool,
                    LedgerEntry.kind != "correction",
                    LedgerEntry.period_start >= start,
                    LedgerEntry.period_start < end,
                )
                .order_by(LedgerEntry.id)
            )
        )
        if not rows:
            outcome.missing_from_ledger.append((span, bill))
            continue
        ours = sum(r.amount_micros for r in rows) + _corrections(session, [r.id for r in rows])
        ledger_amount = Money(ours, bill.currency)
        if abs(bill.micros - ours) <= TOLERANCE_MICROS:
            outcome.matched.append((span, bill))
            continue
        outcome.differs.append((span, bill, ledger_amount))
        note = f"reconciled with the bill for {pool} {start:%Y-%m-%d %H}:00-{end:%Y-%m-%d %H}:00"
        for row, part in zip(
            rows, spread(bill.micros - ours, [r.amount_micros for r in rows]), strict=True
        ):
            if part:
                correct(
                    session,
                    row.id,
                    Money(part, bill.currency),
                    note,
                    clock,
                    period=(now, now + timedelta(hours=1)),
                )
                outcome.corrections += 1
    if first is not None and last is not None:
        # The days the bill covers: exports are delivered for whole days.
        day = first.replace(hour=0, minute=0, second=0, microsecond=0)
        end = last.replace(hour=0, minute=0, second=0, microsecond=0)
        end += timedelta(days=1) if end < last else timedelta(0)
        outcome.missing_from_bill = _not_billed(session, billed, day, end)
    return outcome


def _convert(amount: Money, to: str, rates: Mapping[str, Decimal], outcome: Outcome) -> Money:
    missing = [c for c in (amount.currency, to) if c != "USD" and c not in rates]
    if missing:
        raise CurrencyError(
            f"the bill is in {amount.currency} and the ledger in {to}: add usdExchangeRates."
            f"{missing[0]} (units per USD on the bill's dates) to the ServiceConfig"
        )
    for c in (amount.currency, to):
        if c != "USD":
            used = outcome.rates.setdefault(c, [])
            if rates[c] not in used:
                used.append(rates[c])
    return convert({amount.currency: amount.micros}, to, dict(rates))


def _corrections(session: Session, ids: Sequence[int]) -> int:
    """What corrections of these rows add, wherever they were posted."""
    total = 0
    for chunk in range(0, len(ids), 500):
        total += int(
            session.scalar(
                select(
                    cast(func.coalesce(func.sum(LedgerEntry.amount_micros), 0), BigInteger)
                ).where(LedgerEntry.corrects_id.in_(ids[chunk : chunk + 500]))
            )
            or 0
        )
    return total


def _not_billed(
    session: Session, billed: Mapping[Span, int], first: datetime, last: datetime
) -> list[tuple[Span, Money]]:
    """Ledger hours, of the pools the bill mentions, inside its time range and in none of its
    spans: charged by burst, not (yet) by the cloud."""
    covered: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for pool, start, end in billed:
        covered[pool].append((start, end))
    query = (
        select(
            LedgerEntry.pool,
            LedgerEntry.period_start,
            LedgerEntry.currency,
            cast(func.sum(LedgerEntry.amount_micros), BigInteger),
        )
        .where(
            LedgerEntry.pool.in_(list(covered)),
            LedgerEntry.kind != "correction",
            LedgerEntry.period_start >= first,
            LedgerEntry.period_start < last,
        )
        .group_by(LedgerEntry.pool, LedgerEntry.period_start, LedgerEntry.currency)
        .order_by(LedgerEntry.pool, LedgerEntry.period_start)
    )
    missing: dict[Span, Money] = {}
    for name, hour, currency, micros in session.execute(query):
        if name and micros and not any(s <= hour < e for s, e in covered[name]):
            # In the bill's own spans: days for a daily bill, hours for an hourly one.
            daily = max(e - s for s, e in covered[name]) >= timedelta(days=1)
            start = hour.replace(hour=0) if daily else hour
            span = (name, start, start + (timedelta(days=1) if daily else timedelta(hours=1)))
            missing[span] = missing.get(span, Money.zero(currency)) + Money(int(micros), currency)
    return sorted(missing.items())
