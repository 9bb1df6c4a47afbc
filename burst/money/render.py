"""Finance reports as files: an aligned table, CSV, JSON, Markdown, or one self-contained HTML page.

The CSV is for machines: plain numbers (exact decimals, shares as fractions), a currency column,
no total row among the data. The HTML page carries its charts as inline SVG drawn by matplotlib:
daily spend stacked by provider with every day on the axis and each day's total written on its
bar, and each budget's remaining amount by day with overruns marked.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from burst.money.report import Format, Report

if TYPE_CHECKING:
    from matplotlib.axes import Axes

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
LEGEND = (
    "Usage is GPU time charged to the job that held it. Overhead is what a pool cost while it "
    "was not yet ready (provisioning) and the billing minimums of short-lived nodes; idle is a "
    "ready pool's GPU time that no job held (waiting for work, the tail before teardown). Both "
    "are charged to the team of the policy that made the pool unless the report shares them."
)


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


def _rates(report: Report) -> str:
    if not report.rates:
        return "all amounts in USD"
    return "rates per USD: " + ", ".join(
        f"{c} {report.rate_notes.get(c, r)}" for c, r in report.rates.items()
    )


def render(report: Report, fmt: Format) -> str:
    if fmt == "json":
        return _json(report)
    if fmt == "csv":
        return _csv(report)
    if fmt == "md":
        return _markdown(report)
    if fmt == "html":
        return _html(report)
    widths = [
        max(len(x) for x in col) for col in zip(_columns(report), *_cells(report), strict=False)
    ]
    lines = ["  ".join(c.ljust(w) for c, w in zip(_columns(report), widths, strict=False))]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) for row in _cells(report)
    ]
    lines.append(f"total {report.total} ({_rates(report)}; days in {report.zone})")
    for b in report.budgets:
        lines.append(
            f"budget {b.name} ({b.scope}): used {b.used} of {b.amount}, left {b.left}, "
            f"forecast {b.forecast}"
        )
    return "\n".join(lines) + "\n"


def _json(report: Report) -> str:
    data = {
        "period": report.period,
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "time_zone": report.zone,
        "currency": report.currency,
        "rates_per_usd": {c: str(r) for c, r in report.rates.items()},
        "rate_sources": report.rate_notes,
        "by": report.by,
        "shared": report.shared,
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
                "hard": b.hard,
                **{
                    k: str(getattr(b, k).to_decimal())
                    for k in ("amount", "used", "left", "forecast")
                },
            }
            for b in report.budgets
        ],
    }
    return json.dumps(data, indent=2)


def _csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180, as spreadsheets expect
    writer.writerow([report.by, "currency", "spend", "gpu_hours", "overhead_share", "idle_share"])
    for r in report.rows:
        writer.writerow(
            [
                r.key,
                report.currency,
                str(r.spend.to_decimal()),  # exact: the rows add up to the total
                f"{r.gpu_hours:.6f}",
                f"{r.overhead_share:.6f}",
                f"{r.idle_share:.6f}",
            ]
        )
    return out.getvalue()


def _markdown(report: Report) -> str:
    lines = [
        f"# burst spend {report.period}",
        "",
        "| " + " | ".join(_columns(report)) + " |",
        "|" + " --- |" * len(_columns(report)),
    ]
    lines += ["| " + " | ".join(c) + " |" for c in _cells(report)]
    lines += ["", f"Total: **{report.total}** ({_rates(report)}; days in {report.zone})"]
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
    return "\n".join([*lines, "", LEGEND]) + "\n"


def _svg(draw: object) -> str:
    """A matplotlib figure as inline SVG text: fonts as text, no metadata, stable ids."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "burst"}):
        figure = Figure(figsize=(9, 3.4), layout="constrained")
        draw(figure.add_subplot())  # type: ignore[operator]
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _daily(daily: Mapping[str, Mapping[str, int]], currency: str) -> object:
    def draw(ax: Axes) -> None:
        days = list(daily)
        providers = sorted({p for d in daily.values() for p in d})
        bottom = [0.0] * len(days)
        for j, provider in enumerate(providers):
            values = [daily[d].get(provider, 0) / 1e6 for d in days]
            ax.bar(days, values, bottom=bottom, label=provider, color=PALETTE[j % len(PALETTE)])
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        for x, total in enumerate(bottom):
            ax.annotate(f"{total:.2f}", (x, total), ha="center", va="bottom", fontsize=7)
        ax.set_ylabel(currency)
        ax.set_xlabel("day")
        ax.set_xticks(range(len(days)), [d[5:] for d in days], rotation=90, fontsize=7)
        ax.set_title("Daily spend by provider")
        if providers:
            ax.legend(fontsize=8)

    return draw


def _burndown(report: Report) -> object:
    def draw(ax: Axes) -> None:
        for j, b in enumerate(report.budgets):
            days = [d[5:] for d, _ in b.left_by_day]
            left = [v / 1e6 for _, v in b.left_by_day]
            color = PALETTE[j % len(PALETTE)]
            ax.plot(days, left, marker="o", color=color, label=f"{b.name} ({b.amount.currency})")
            over = [(d, v) for d, v in zip(days, left, strict=True) if v < 0]
            if over:
                xs, ys = zip(*over, strict=True)
                ax.scatter(xs, ys, color="#d62728", marker="x", zorder=3)
                ax.annotate("over budget", over[0], color="#d62728", fontsize=8)
        ax.axhline(0, color="#333", linewidth=0.8)
        ax.set_ylabel("left")
        ax.set_xlabel("day")
        ax.tick_params(axis="x", rotation=90, labelsize=7)
        ax.set_title("Budgets: what is left, by day (x: overrun)")
        if report.budgets:
            ax.legend(fontsize=8)

    return draw


def _html(report: Report) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in _columns(report))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row in _cells(report)
    )
    budgets = "".join(
        f"<tr><td>{html.escape(b.name)}</td><td>{html.escape(b.scope)}</td><td>{b.amount}</td>"
        f"<td>{b.used}</td><td>{b.left}</td><td>{b.forecast}</td></tr>"
        for b in report.budgets
    )
    burndown = (
        f"<figure>{_svg(_burndown(report))}</figure>"
        if report.budgets
        else "<p>No budgets are configured.</p>"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>burst spend {html.escape(report.period)}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child,th:first-child{{text-align:left}}
figure{{margin:1em 0}}</style></head><body>
<h1>burst spend {html.escape(report.period)}</h1>
<p>{report.start:%Y-%m-%d} to {report.end - timedelta(days=1):%Y-%m-%d} ({html.escape(report.zone)}), in
{report.currency}; {html.escape(_rates(report))}. Total: <strong>{report.total}</strong>.</p>
<figure>{_svg(_daily(report.daily_by_provider, report.currency))}</figure>
<h2>By {html.escape(report.by)}</h2><table><tr>{head}</tr>{body}</table>
<p>{html.escape(LEGEND)}</p>
<h2>Budgets</h2>{burndown}
<table><tr><th>budget</th><th>scope</th><th>amount</th><th>used</th><th>left</th><th>forecast</th></tr>{budgets}</table>
</body></html>
"""
