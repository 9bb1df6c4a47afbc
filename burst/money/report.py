"""Finance reports from the ledger: spend, GPU-hours, overhead and idle shares, budgets, forecast.

`build()` reads ledger rows of a period and groups them (by team, policy, provider, region, job or
day); `render()` writes the report as a table, CSV, JSON, Markdown or one self-contained HTML file
with two charts (daily spend stacked by provider, budget burn-down per team) drawn as inline SVG.
Amounts are shown in one reporting currency, converted with the ServiceConfig's rates; a currency
without a rate is an error, not a guess.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Literal
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.orm import Session

from burst.amounts import Money
from burst.money.ledger import BudgetLimit, convert
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
    used: Money
    left: Money
    forecast: Money
    left_by_day: list[tuple[str, int]] = field(default_factory=list)  # in the budget's currency


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


def _share(part: Money, whole: Money) -> float:
    return part.micros / whole.micros if whole.micros else 0.0


def _key(entry: LedgerEntry, by: GroupBy) -> str:
    if by == "day":
        return entry.period_start.strftime("%Y-%m-%d")
    if by == "job":
        return (
            entry.workload_uid and f"{entry.namespace or '?'}/{entry.workload_uid}"
        ) or f"({entry.kind})"
    return str(getattr(entry, by) or "(none)")


def build(
    session: Session,
    period: str,
    by: GroupBy,
    currency: str,
    usd_rates: Mapping[str, Decimal],
    budgets: Sequence[BudgetLimit] = (),
    now: datetime | None = None,
) -> Report:
    start, end = parse_period(period)
    entries = list(
        session.scalars(
            select(LedgerEntry)
            .where(LedgerEntry.period_start >= start, LedgerEntry.period_start < end)
            .order_by(LedgerEntry.period_start)
        )
    )

    def money(amounts: Mapping[str, int]) -> Money:
        return convert(amounts, currency, usd_rates)

    groups: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    seconds: dict[str, int] = defaultdict(int)
    daily_provider: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    for e in entries:
        key = _key(e, by)
        groups[key][e.kind][e.currency] += e.amount_micros
        groups[key]["all"][e.currency] += e.amount_micros
        seconds[key] += e.gpu_seconds
        day = e.period_start.strftime("%Y-%m-%d")
        daily_provider[day][e.provider or "?"][e.currency] += e.amount_micros
    rows = []
    total = Money.zero(currency)
    for key in sorted(groups):
        spend = money(groups[key]["all"])
        total += spend
        overhead, idle = money(groups[key]["overhead"]), money(groups[key]["idle"])
        rows.append(
            Row(key, spend, seconds[key] / 3600, _share(overhead, spend), _share(idle, spend))
        )
    report = Report(period, start, end, currency, by, rows, total)
    report.daily_by_provider = {
        d: {p: money(v).micros for p, v in ps.items()} for d, ps in sorted(daily_provider.items())
    }
    now = now or end
    elapsed = max(min(now, end) - start, timedelta(seconds=1))
    for b in budgets:
        scoped: dict[str, int] = defaultdict(int)
        per_day: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for e in entries:
            if getattr(e, b.scope) == b.value:
                scoped[e.currency] += e.amount_micros
                per_day[e.period_start.strftime("%Y-%m-%d")][e.currency] += e.amount_micros
        used = convert(scoped, b.amount.currency, usd_rates)
        left, left_by_day = b.amount.micros, []
        for day in sorted(report.daily_by_provider):
            left -= convert(per_day.get(day, {}), b.amount.currency, usd_rates).micros
            left_by_day.append((day, left))
        forecast = Money(
            int(Decimal(used.micros) * Decimal((end - start) / elapsed)), b.amount.currency
        )
        report.budgets.append(
            BudgetRow(
                b.name,
                f"{b.scope}={b.value}",
                b.amount,
                used,
                b.amount - used,
                forecast,
                left_by_day,
            )
        )
    return report


# --- rendering ------------------------------------------------------------------------------------


def _columns(report: Report) -> list[str]:
    return [report.by, f"spend ({report.currency})", "GPU-hours", "overhead share", "idle share"]


def _cells(report: Report) -> list[list[str]]:
    return [
        [
            r.key,
            f"{r.spend.to_decimal():.2f}",
            f"{r.gpu_hours:.2f}",
            f"{r.overhead_share:.1%}",
            f"{r.idle_share:.1%}",
        ]
        for r in report.rows
    ]


def render(report: Report, fmt: Format) -> str:
    if fmt == "json":
        data = {
            "period": report.period,
            "start": report.start.isoformat(),
            "end": report.end.isoformat(),
            "currency": report.currency,
            "by": report.by,
            "total": str(report.total.to_decimal()),
            "rows": [
                {
                    "key": r.key,
                    "spend": str(r.spend.to_decimal()),
                    "gpu_hours": round(r.gpu_hours, 4),
                    "overhead_share": round(r.overhead_share, 4),
                    "idle_share": round(r.idle_share, 4),
                }
                for r in report.rows
            ],
            "budgets": [
                {
                    "name": b.name,
                    "scope": b.scope,
                    "currency": b.amount.currency,
                    **{
                        k: str(getattr(b, k).to_decimal())
                        for k in ("amount", "used", "left", "forecast")
                    },
                }
                for b in report.budgets
            ],
        }
        return json.dumps(data, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180, as spreadsheets expect
        writer.writerow(_columns(report))
        writer.writerows(_cells(report))
        writer.writerow(["total", f"{report.total.to_decimal():.2f}", "", "", ""])
        return out.getvalue()
    if fmt == "md":
        lines = [
            f"# burst spend {report.period}",
            "",
            "| " + " | ".join(_columns(report)) + " |",
            "|" + " --- |" * len(_columns(report)),
        ]
        lines += ["| " + " | ".join(c) + " |" for c in _cells(report)]
        lines += ["", f"Total: **{report.total}**"]
        if report.budgets:
            lines += [
                "",
                "| budget | scope | amount | used | left | forecast |",
                "| --- | --- | ---: | ---: | ---: | ---: |",
            ]
            lines += [
                f"| {b.name} | {b.scope} | {b.amount} | {b.used} | {b.left} | {b.forecast} |"
                for b in report.budgets
            ]
        return "\n".join(lines) + "\n"
    if fmt == "html":
        return _html(report)
    widths = [
        max(len(x) for x in col) for col in zip(_columns(report), *_cells(report), strict=False)
    ]
    lines = ["  ".join(c.ljust(w) for c, w in zip(_columns(report), widths, strict=False))]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) for row in _cells(report)
    ]
    lines.append(f"total {report.total}")
    for b in report.budgets:
        lines.append(
            f"budget {b.name} ({b.scope}): used {b.used} of {b.amount}, left {b.left}, forecast {b.forecast}"
        )
    return "\n".join(lines) + "\n"


PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def _stacked_bars(daily: Mapping[str, Mapping[str, int]], title: str) -> str:
    days = list(daily)
    series = sorted({k for d in daily.values() for k in d})
    width, height, pad = 640, 260, 40
    peak = max((sum(d.values()) for d in daily.values()), default=0) or 1
    bar = (width - 2 * pad) / max(len(days), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#333"/>',
    ]
    for i, day in enumerate(days):
        y = float(height - pad)
        for j, name in enumerate(series):
            h = (height - 2 * pad) * daily[day].get(name, 0) / peak
            if h > 0:
                parts.append(
                    f'<rect class="bar" x="{pad + i * bar + 2:.1f}" y="{y - h:.1f}" width="{max(bar - 4, 1):.1f}" '
                    f'height="{h:.1f}" fill="{PALETTE[j % len(PALETTE)]}"><title>{html.escape(day)} '
                    f"{html.escape(name)}: {daily[day].get(name, 0) / 1e6:.2f}</title></rect>"
                )
                y -= h
        parts.append(
            f'<text x="{pad + i * bar + bar / 2:.1f}" y="{height - pad + 14}" font-size="9" '
            f'text-anchor="middle">{html.escape(day[5:])}</text>'
        )
    for j, name in enumerate(series):
        parts.append(
            f'<rect x="{width - pad - 110}" y="{10 + j * 14}" width="10" height="10" fill="{PALETTE[j % len(PALETTE)]}"/>'
            f'<text x="{width - pad - 95}" y="{19 + j * 14}" font-size="11">{html.escape(name)}</text>'
        )
    return "".join(parts) + "</svg>"


def _burndown(report: Report) -> str:
    width, height, pad = 640, 260, 40
    days = list(report.daily_by_provider)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="budget burn-down"><title>budget burn-down per team</title>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#333"/>',
    ]
    step = (width - 2 * pad) / max(len(days) - 1, 1)
    for j, budget in enumerate(b for b in report.budgets if b.scope.startswith("team=")):
        points = []
        for i, (_, left) in enumerate(budget.left_by_day):
            y = pad + (height - 2 * pad) * (1 - max(left, 0) / max(budget.amount.micros, 1))
            points.append(f"{pad + i * step:.1f},{y:.1f}")
        parts.append(
            f'<polyline class="burn" fill="none" stroke="{PALETTE[j % len(PALETTE)]}" stroke-width="2" '
            f'points="{" ".join(points)}"><title>{html.escape(budget.name)}</title></polyline>'
            f'<text x="{width - pad - 110}" y="{19 + j * 14}" font-size="11" fill="{PALETTE[j % len(PALETTE)]}">'
            f"{html.escape(budget.name)}</text>"
        )
    return "".join(parts) + "</svg>"


def _html(report: Report) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in _columns(report))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row in _cells(report)
    )
    budgets = "".join(
        f"<tr><td>{html.escape(b.name)}</td><td>{html.escape(b.scope)}</td><td>{b.amount}</td><td>{b.used}</td>"
        f"<td>{b.left}</td><td>{b.forecast}</td></tr>"
        for b in report.budgets
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>burst spend {html.escape(report.period)}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child,th:first-child{{text-align:left}}
figure{{margin:1em 0}}</style></head><body>
<h1>burst spend {html.escape(report.period)}</h1>
<p>{report.start:%Y-%m-%d} to {report.end - timedelta(days=1):%Y-%m-%d}, in {report.currency}. Total: <strong>{report.total}</strong>.</p>
<figure><figcaption>Daily spend by provider</figcaption>{_stacked_bars(report.daily_by_provider, "daily spend by provider")}</figure>
<figure><figcaption>Budget burn-down per team</figcaption>{_burndown(report)}</figure>
<h2>By {html.escape(report.by)}</h2><table><tr>{head}</tr>{body}</table>
<h2>Budgets</h2><table><tr><th>budget</th><th>scope</th><th>amount</th><th>used</th><th>left</th><th>forecast</th></tr>{budgets}</table>
</body></html>
"""
