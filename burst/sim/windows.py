"""The windowed optimum, the reference `burst simulate --optimum N` reports each policy against.

The whole trace's lower bound (bound.py) is 0 whenever on-prem could do all the work in time if
jobs could be split and preempted, as on the shipped traces at their default deadlines: a ratio
to it says nothing. A trace of thousands of jobs is too large for the exact optimum of whole jobs,
a window of a few hundred is not (optimum.py). So the trace is cut into windows of N consecutive
jobs, and each window is planned exactly, knowing its jobs' arrivals and runtimes, on the on-prem
GPUs the earlier windows' plans leave free: a schedule of the whole trace a planner who knew each
window in advance would pick, window by window (not the optimum of the whole trace, which could
only be lower, and is out of reach).

Each policy's cost is set against it window by window: what its replay paid for the window's jobs
(each job's node-hours, as the ledger attributes them) plus the idle and overhead of its pools
shared out in proportion. The median and worst window, and the whole run, are reported; a window
whose plan needs no cloud has no ratio, and what a policy spent there is reported instead.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from burst.sim.optimum import Optimum, OptJob, grid, plan
from burst.sim.state import Outcome
from burst.sim.trace import SimJob

MINUTE = 60  # the resolution of what the plans hold on-prem (every grid step is a multiple)


@dataclass(frozen=True)
class Window:
    first: int  # its first job's place in the trace
    ids: tuple[str, ...]  # its jobs'
    step: int  # its grid, in seconds
    best: Optimum

    @property
    def jobs(self) -> int:
        return len(self.ids)


def reference(
    jobs: Sequence[SimJob],
    gpus: int,
    price: Callable[[int], float | None],
    size: int,
    time_limit_s: float = 60.0,
    progress: Callable[[float], None] | None = None,
) -> list[Window]:
    """Each window of `size` consecutive jobs planned exactly on what the earlier windows' plans
    leave free on-prem; each job priced at the cheapest per-GPU-second offer for its pods."""
    if not jobs:
        return []
    end = max(j.deadline for j in jobs) + 86400
    held = np.zeros(end // MINUTE + 1, dtype=np.int64)  # GPUs the plans hold, minute by minute
    out = []
    for first in range(0, len(jobs), size):
        part = jobs[first : first + size]
        items = [
            OptJob(j.submit, j.deadline, j.duration, j.gpus, price(j.gpus_per_pod)) for j in part
        ]
        step = grid(items)
        per = step // MINUTE

        def free(slot: int, n: int, per: int = per) -> np.ndarray:
            minutes = held[slot * per : (slot + n) * per]
            minutes = np.pad(minutes, (0, n * per - len(minutes)))
            most: np.ndarray = minutes.reshape(n, per).max(axis=1)
            return gpus - most

        best = plan(items, step, free, time_limit_s)
        for n, slot in best.starts.items():
            length = -(-items[n].duration // step)
            held[slot * per : (slot + length) * per] += items[n].gpus
        out.append(Window(first, tuple(j.job_id for j in part), step, best))
        if progress:
            progress(min(1.0, (first + size) / len(jobs)))
    return out


def window_costs(outcome: Outcome, windows: Sequence[Window]) -> list[int]:
    """What the replay paid for each window's jobs, USD micros: their own node-hours, and the
    pools' idle and overhead shared out in proportion to them (the rounding's remainder to the
    last window, so that the windows add up to the bill)."""
    own = [sum(outcome.job_usd_micros.get(i, 0) for i in w.ids) for w in windows]
    attributed = sum(own)
    rest = outcome.cost_usd_micros - attributed
    shares = [o + rest * o // attributed for o in own] if attributed else [0] * len(own)
    if shares:
        shares[-1] += outcome.cost_usd_micros - sum(shares)
    return shares


def summary(
    windows: Sequence[Window], outcomes: Sequence[Outcome], money: Callable[[int], Decimal]
) -> dict[str, Any]:
    """The windows' plans, and each policy's cost against them: per window, median, worst and over
    the whole run."""
    plans = [Decimal(str(w.best.cost)).quantize(Decimal("0.01")) for w in windows]
    total = sum(plans, Decimal(0))
    by_policy = {}
    for o in outcomes:
        costs = [money(c) for c in window_costs(o, windows)]
        ratios = [float(c / p) for c, p in zip(costs, plans, strict=True) if p > 0]
        by_policy[o.policy] = {
            "ratio": round(float(money(o.cost_usd_micros) / total), 3) if total > 0 else None,
            "median_window": round(statistics.median(ratios), 3) if ratios else None,
            "worst_window": round(max(ratios), 3) if ratios else None,
            "spent_where_plan_needs_no_cloud": float(
                sum((c for c, p in zip(costs, plans, strict=True) if p == 0), Decimal(0))
            ),
        }
    return {
        "window_jobs": windows[0].jobs if windows else 0,
        "windows": len(windows),
        "windows_needing_a_cloud": sum(1 for p in plans if p > 0),
        "cost": float(total),
        "exact_windows": sum(1 for w in windows if w.best.exact),
        "grid_s": sorted({w.step for w in windows}),
        "by_policy": by_policy,
        "per_window": [
            {
                "first_job": w.first,
                "jobs": w.jobs,
                "grid_s": w.step,
                "cost": float(p),
                "exact": w.best.exact,
                "cloud_jobs": w.best.cloud_jobs,
                "no_offer": w.best.no_offer,
            }
            for w, p in zip(windows, plans, strict=True)
        ],
    }


def table(data: dict[str, Any], currency: str) -> list[str]:
    """The text report's lines for the windowed optimum."""
    lines = [
        "",
        f"windowed optimum: {data['cost']:,.2f} {currency} ({_windows(data['windows'])} of "
        f"{data['window_jobs']} jobs, {data['windows_needing_a_cloud']} needing a cloud, "
        f"{data['exact_windows']} solved to optimality)",
        f"{'policy':<14}{'x optimum':>10}{'median':>8}{'worst':>8}{'spent where it needs none':>28}",
    ]
    for name, s in data["by_policy"].items():
        cells = [
            "-" if s[k] is None else f"{s[k]:.2f}"
            for k in ("ratio", "median_window", "worst_window")
        ]
        lines.append(
            f"{name:<14}{cells[0]:>10}{cells[1]:>8}{cells[2]:>8}"
            f"{s['spent_where_plan_needs_no_cloud']:>23,.2f} {currency}"
        )
    return lines


def section(data: dict[str, Any], currency: str) -> str:
    """The HTML report's part for the windowed optimum: a table (a chart of a few ratios would
    say no more)."""
    cur = html.escape(currency)
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td>"
        + "".join(
            f"<td>{'-' if s[k] is None else format(s[k], '.2f')}</td>"
            for k in ("ratio", "median_window", "worst_window")
        )
        + f"<td>{s['spent_where_plan_needs_no_cloud']:,.2f}</td></tr>"
        for name, s in data["by_policy"].items()
    )
    needing = data["windows_needing_a_cloud"]
    return (
        f"<h2>Against the windowed optimum</h2><p>{data['cost']:,.2f} {cur}: the trace planned "
        f"exactly in {_windows(data['windows'])} of {data['window_jobs']} jobs, knowing each "
        f"window's arrivals and runtimes ({_windows(needing)} {'needs' if needing == 1 else 'need'}"
        f" a cloud).</p><table><tr><th>policy</th><th>x optimum</th><th>median window</th>"
        f"<th>worst window</th><th>spent where it needs none, {cur}</th></tr>{rows}</table>"
    )


def _windows(n: int) -> str:
    return f"{n} window" if n == 1 else f"{n} windows"
