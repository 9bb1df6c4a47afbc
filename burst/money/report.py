"""Finance reports from the ledger: spend, GPU-hours, overhead and idle shares, budgets, forecast.

`build()` aggregates a period's ledger rows in the database (by team, policy, provider, region,
job or day, on the calendar of the configured time zone) and reads each budget as the service
enforces it; render.py writes the result. Amounts are shown in one reporting currency, converted
with the ServiceConfig's rates, which the report lists; a currency without a rate is an error,
not a guess.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Literal
from zoneinfo import ZoneInfo

from sqlalchemy import BigInteger, ColumnElement, and_, cast, func, select
from sqlalchemy.orm import Session

from burst.amounts import Money
from burst.money.ledger import BudgetLimit, convert, period_bounds
from burst.money.ledger import used as ledger_used
from burst.store.tables import LedgerEntry

GroupBy = Literal["team", "policy", "provider", "region", "job", "day"]
Format = Literal["text", "csv", "json", "md", "html"]


class PeriodError(ValueError):
    pass


def parse_period(text: str, zone: str = "UTC") -> tuple[datetime, datetime]:
    """`2026-11` (a month), `2026-W47` (an ISO week) or `2026-11-01..2026-11-15` (days,
    inclusive), on the calendar of time zone `zone`; the bounds are returned in UTC."""
    value = text.strip()
    try:
        start, end = _local_bounds(value)
    except ValueError as exc:  # month 13, week 60, 31 February
        raise PeriodError(f"bad period {text!r}: {exc}") from None
    if end <= start:
        raise PeriodError(f"period {text!r} ends before it starts")
    tz = ZoneInfo(zone)
    return start.replace(tzinfo=tz).astimezone(UTC), end.replace(tzinfo=tz).astimezone(UTC)


def _local_bounds(value: str) -> tuple[datetime, datetime]:
    """Calendar bounds; their tzinfo is a placeholder that parse_period replaces."""
    if m := re.fullmatch(r"(\d{4})-(\d{2})", value):
        start = datetime(int(m[1]), int(m[2]), 1, tzinfo=UTC)
        return start, (start + timedelta(days=32)).replace(day=1)
    if m := re.fullmatch(r"(\d{4})-W(\d{2})", value):
        start = datetime.combine(
            date.fromisocalendar(int(m[1]), int(m[2]), 1), datetime.min.time(), UTC
        )
        return start, start + timedelta(days=7)
    if m := re.fullmatch(r"(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})", value):
        start = datetime.fromisoformat(m[1]).replace(tzinfo=UTC)
        return start, datetime.fromisoformat(m[2]).replace(tzinfo=UTC) + timedelta(days=1)
    raise PeriodError(f"bad period {value!r}: use 2026-11, 2026-W47 or 2026-11-01..2026-11-15")


@dataclass
class Row:
    key: str
    spend: Money
    gpu_hours: float
    overhead_share: float
    idle_share: float


@dataclass
class BudgetRow:
    name: str
    scope: str
    amount: Money
    used: Money  # posted spend in the budget's period plus what reservations still hold
    left: Money
    forecast: Money  # used, plus the last week's run rate to the end of the budget's period
    left_by_day: list[tuple[str, int]] = field(default_factory=list)  # in the budget's currency
    hard: bool = True


@dataclass
class Report:
    period: str
    start: datetime
    end: datetime
    currency: str
    by: str
    rows: list[Row]
    total: Money
    budgets: list[BudgetRow] = field(default_factory=list)
    daily_by_provider: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # day -> provider -> micros
    rates: dict[str, Decimal] = field(default_factory=dict)  # units per USD, those used
    rate_notes: dict[str, str] = field(default_factory=dict)  # their dates and sources
    zone: str = "UTC"
    shared: bool = False  # idle and overhead spread over the teams whose jobs used the pools


def _share(part: Money, whole: Money) -> float:
    return part.micros / whole.micros if whole.micros else 0.0


_COLUMNS = {
    "team": LedgerEntry.team,
    "policy": LedgerEntry.policy,
    "provider": LedgerEntry.provider,
    "region": LedgerEntry.region,
    # Rows posted before they carried the workload's name show namespace/uid.
    "job": func.coalesce(
        LedgerEntry.workload_name,
        LedgerEntry.namespace + "/" + LedgerEntry.workload_uid,
        LedgerEntry.workload_uid,
    ),
    "day": LedgerEntry.period_start,  # hours, folded into local days here
}


def _day(at: datetime, tz: ZoneInfo) -> str:
    return at.astimezone(tz).strftime("%Y-%m-%d")


def build(
    session: Session,
    period: str,
    by: GroupBy,
    currency: str,
    usd_rates: Mapping[str, Decimal],
    budgets: Sequence[BudgetLimit] = (),
    now: datetime | None = None,
    zone: str = "UTC",
    share: bool = False,
) -> Report:
    """The report of a period, aggregated in the database: a few hundred grouped rows come back
    whatever the ledger's size. `share` spreads each pool's idle and overhead over the teams whose
    jobs ran on it, by their usage there (by team only)."""
    if share and by != "team":
        raise PeriodError("sharing idle and overhead applies to the report by team")
    start, end = parse_period(period, zone)
    tz = ZoneInfo(zone)
    in_period = and_(LedgerEntry.period_start >= start, LedgerEntry.period_start < end)
    amount = cast(func.sum(LedgerEntry.amount_micros), BigInteger)
    seconds = cast(func.sum(LedgerEntry.gpu_seconds), BigInteger)
    # key -> kind -> currency -> micros, and key -> GPU-seconds
    groups: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    gpu_seconds: dict[str, int] = defaultdict(int)
    if share:
        _shared_by_team(session, in_period, groups, gpu_seconds)
    else:
        key = _COLUMNS[by]
        query = (
            select(key, LedgerEntry.kind, LedgerEntry.currency, amount, seconds)
            .where(in_period)
            .group_by(key, LedgerEntry.kind, LedgerEntry.currency)
        )
        for value, kind, code, micros, secs in session.execute(query):
            if isinstance(value, datetime):
                name = _day(value, tz)
            elif value is None:
                name = f"({kind})" if by == "job" else "(none)"
            else:
                name = str(value)
            groups[name][kind][code] += int(micros or 0)
            gpu_seconds[name] += int(secs or 0)
    rows = []
    for name in sorted(groups):
        by_kind = groups[name]
        everything: dict[str, int] = defaultdict(int)
        for amounts in by_kind.values():
            for code, micros in amounts.items():
                everything[code] += micros
        spend = convert(everything, currency, usd_rates)
        overhead = convert(by_kind.get("overhead", {}), currency, usd_rates)
        idle = convert(by_kind.get("idle", {}), currency, usd_rates)
        rows.append(
            Row(name, spend, gpu_seconds[name] / 3600, _share(overhead, spend), _share(idle, spend))
        )
    # The total is the rows' sum, so that the rows always add up to it.
    total = sum((r.spend for r in rows), Money.zero(currency))
    report = Report(period, start, end, currency, by, rows, total, zone=zone, shared=share)
    used_codes = {code for g in groups.values() for a in g.values() for code in a}
    report.rates = {c: usd_rates[c] for c in sorted(used_codes | {currency}) if c in usd_rates}
    daily: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    hourly = (
        select(LedgerEntry.period_start, LedgerEntry.provider, LedgerEntry.currency, amount)
        .where(in_period)
        .group_by(LedgerEntry.period_start, LedgerEntry.provider, LedgerEntry.currency)
    )
    for at, provider, code, micros in session.execute(hourly):
        daily[_day(at, tz)][provider or "?"][code] += int(micros or 0)
    report.daily_by_provider = {
        d: {p: convert(v, currency, usd_rates).micros for p, v in ps.items()}
        for d, ps in sorted(daily.items())
    }
    at = min(now or end, end - timedelta(microseconds=1))
    report.budgets = [_budget_row(session, b, at, usd_rates) for b in budgets]
    return report


def _shared_by_team(
    session: Session,
    in_period: ColumnElement[bool],
    groups: dict[str, dict[str, dict[str, int]]],
    gpu_seconds: dict[str, int],
) -> None:
    """Per pool, its idle and overhead go to the teams whose jobs used it, by their usage there
    (largest remainder, so nothing is lost or made up); a pool nobody used keeps them."""
    query = (
        select(
            LedgerEntry.pool,
            LedgerEntry.team,
            LedgerEntry.kind,
            LedgerEntry.currency,
            cast(func.sum(LedgerEntry.amount_micros), BigInteger),
            cast(func.sum(LedgerEntry.gpu_seconds), BigInteger),
        )
        .where(in_period)
        .group_by(LedgerEntry.pool, LedgerEntry.team, LedgerEntry.kind, LedgerEntry.currency)
    )
    pools: dict[str | None, list[tuple[str, str, str, int, int]]] = defaultdict(list)
    for pool, team, kind, code, micros, secs in session.execute(query):
        pools[pool].append((team, kind, code, int(micros or 0), int(secs or 0)))
    for lines in pools.values():
        usage: dict[str, int] = defaultdict(int)
        for team, kind, _, _, secs in lines:
            if kind == "usage":
                usage[team] += secs
        for team, kind, code, micros, secs in lines:
            if kind in ("idle", "overhead") and usage:
                for to, part in _spread(micros, usage).items():
                    groups[to][kind][code] += part
                for to, part in _spread(secs, usage).items():
                    gpu_seconds[to] += part
            else:
                groups[team][kind][code] += micros
                gpu_seconds[team] += secs


def _spread(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """`total` in whole units over `weights`, by largest remainder (pure)."""
    whole = sum(weights.values())
    exact = {k: Decimal(total) * w / whole for k, w in weights.items()}
    out = {k: int(v // 1) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], k))[: total - sum(out.values())]:
        out[k] += 1
    return out


def _budget_row(
    session: Session, b: BudgetLimit, at: datetime, usd_rates: Mapping[str, Decimal]
) -> BudgetRow:
    """A budget as the service enforces it (ledger.used: its own period, reservations held), its
    posted spend per day, and a forecast from the last week's run rate."""
    used = ledger_used(session, b, at, usd_rates)
    start, end = period_bounds(b.period, at, b.zone)
    tz = ZoneInfo(b.zone)
    scope = {
        "team": LedgerEntry.team,
        "policy": LedgerEntry.policy,
        "namespace": LedgerEntry.namespace,
    }[b.scope]
    hourly = (
        select(
            LedgerEntry.period_start,
            LedgerEntry.currency,
            cast(func.sum(LedgerEntry.amount_micros), BigInteger),
        )
        .where(scope == b.value, LedgerEntry.period_start >= start, LedgerEntry.period_start < end)
        .group_by(LedgerEntry.period_start, LedgerEntry.currency)
    )
    per_day: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    recent: dict[str, int] = defaultdict(int)
    window = max(start, at - timedelta(days=7))
    for hour, code, micros in session.execute(hourly):
        per_day[_day(hour, tz)][code] += int(micros or 0)
        if hour >= window:
            recent[code] += int(micros or 0)
    left, left_by_day = b.amount.micros, []
    for day in sorted(per_day):
        left -= convert(per_day[day], b.amount.currency, usd_rates).micros
        left_by_day.append((day, left))
    rate = convert(recent, b.amount.currency, usd_rates).micros / max(
        (at - window).total_seconds(), 3600
    )
    forecast = used + Money(int(rate * max((end - at).total_seconds(), 0)), b.amount.currency)
    return BudgetRow(
        b.name,
        f"{b.scope}={b.value}",
        b.amount,
        used,
        b.amount - used,
        forecast,
        left_by_day,
        b.hard,
    )
