"""`burst simulate`'s comparison: run burst and the baselines on one trace and seed, compute the
lower bound, optionally sweep each policy's main knob, and render it all as a table, JSON or HTML.

The last step of the simulator: trace.py derives the jobs, simulate.py replays them under each
policy (baselines.py), bound.py bounds the cost from below; this module puts the figures side by
side in the policy's currency.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Literal

from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, Config
from burst.decide import allowed_accelerators
from burst.durations import format_duration
from burst.model import CapacityType
from burst.money.render import PALETTE
from burst.sim import baselines, bound, simulate, windows
from burst.sim.simulate import World, price_cap_usd_micros, target_regions
from burst.sim.state import DEFAULT_CLOUDS, CloudModel, Outcome, RuntimeMode, usd_rate
from burst.sim.trace import SimJob
from burst.sim.variants import with_margin, with_trigger

Format = Literal["text", "json", "html"]
SWEEP = tuple(
    timedelta(minutes=m) for m in (0, 10, 30, 60, 120, 240)
)  # margins for burst, waits for the baselines
# Burst's price on waiting, per GPU-hour in the policy's currency: its cost against completion
# time, beside the baselines' waits.
PRICES = tuple(Decimal(p) for p in ("0.1", "0.2", "0.4", "0.8", "1.6", "3.2", "6.4"))
Progress = Callable[[str, float], None]


@dataclass
class Comparison:
    trace: str
    jobs: int
    onprem: dict[str, int]
    seed: int
    slack: str
    currency: str
    bound: bound.Bound
    outcomes: list[Outcome] = field(default_factory=list)
    sweep: list[tuple[str, timedelta, Outcome]] = field(default_factory=list)
    prices: list[tuple[Decimal, Outcome]] = field(default_factory=list)  # burst's wait price
    windows: list[windows.Window] = field(default_factory=list)  # the windowed optimum
    margin: timedelta = timedelta(0)  # burst's deadline safety margin: fixed
    margin_share: float = 0.0  # and its share of each runtime
    runtime_share: float = 1.0  # the share of each runtime its deadline trigger counts


def cheapest_gpu_second(
    config: Config, policy: BurstPolicy, catalog: Catalog, gpus_per_pod: int
) -> float | None:
    """The lowest price per GPU-second, in the policy's currency, of any node the policy may use
    for a pod of `gpus_per_pod` GPUs (spot too, where the policy allows it): the bound's price."""
    capacity: tuple[CapacityType, ...] = (
        ("on-demand",) if policy.spec.placement.capacity == "on-demand" else ("on-demand", "spot")
    )
    rate = usd_rate(config, policy.spec.limits.currency)
    cap = price_cap_usd_micros(config, policy)
    best = None
    for o in catalog.query(
        allowed_accelerators(policy, None, catalog),
        capacity=capacity,
        regions=set(target_regions(config, policy.spec.placement.targets)),
    ):
        if o.gpus >= gpus_per_pod and (cap is None or o.hourly.micros <= cap):
            per = o.hourly.micros / o.gpus
            best = per if best is None else min(best, per)
    return None if best is None else best * float(rate) / 3600 / 1e6


def pricer(config: Config, policy: BurstPolicy, catalog: Catalog) -> Callable[[int], float | None]:
    """cheapest_gpu_second by pod size, each size looked up once."""
    return functools.cache(lambda per_pod: cheapest_gpu_second(config, policy, catalog, per_pod))


def lower_bound(
    jobs: Sequence[SimJob], gpus: int, config: Config, policy: BurstPolicy, catalog: Catalog
) -> bound.Bound:
    price = pricer(config, policy, catalog)
    items = []
    for j in jobs:
        per_gpu_s = price(j.gpus_per_pod)
        if per_gpu_s is not None:  # no cloud can run it: it is no part of the cloud's cost
            items.append(
                bound.BoundJob(j.submit, j.deadline, j.gpus * j.duration, per_gpu_s, j.gpus)
            )
    return bound.lower_bound(items, gpus)


def policies(
    config: Config,
    policy: BurstPolicy,
    catalog: Catalog,
    jobs: Sequence[SimJob],
    *,
    include_baselines: bool,
) -> list[simulate.Policy]:
    chosen: list[simulate.Policy] = [simulate.Burst(config)]
    if include_baselines:
        chosen += [
            baselines.Never(),
            baselines.no_wait(config, policy, catalog),
            baselines.constant_wait(config, policy, catalog),
            baselines.compute_wait(config, policy, catalog, jobs),
            baselines.starburst(config, policy, catalog, jobs),
        ]
    return chosen


@dataclass(frozen=True)
class _Replay:
    """One replay of the comparison: a policy under a configuration, and where its outcome goes
    (`slot`: "outcome", or the sweep's policy and knob, or the price)."""

    label: str
    policy: simulate.Policy
    config: Config
    slot: tuple[Any, ...]


def _replay(
    replay: _Replay,
    jobs: Sequence[SimJob],
    onprem: dict[str, int],
    catalog: Catalog,
    seed: int,
    clouds: CloudModel,
    runtimes: RuntimeMode = "exact",
    progress: Callable[[float], None] | None = None,
) -> Outcome:
    """Module level, so that a process pool or a Dask worker can run it."""
    world = World(jobs, onprem, replay.config, catalog, seed=seed, clouds=clouds, runtimes=runtimes)
    return world.run(replay.policy, progress)


def _told(progress: Progress | None, label: str) -> Callable[[float], None] | None:
    if progress is None:
        return None
    return lambda share: progress(label, share)


def compare(
    trace_name: str,
    jobs: Sequence[SimJob],
    onprem: dict[str, int],
    config: Config,
    policy: BurstPolicy,
    catalog: Catalog,
    *,
    seed: int,
    slack: str,
    include_baselines: bool = False,
    sweep: bool = False,
    clouds: CloudModel = DEFAULT_CLOUDS,
    progress: Progress | None = None,
    executor: Executor | None = None,
    runtimes: RuntimeMode = "exact",
    optimum: int = 0,
) -> Comparison:
    """Every policy on the same jobs, seed and clouds; the bound; the sweep when asked; with
    `optimum` (jobs per window), the windowed optimum (windows.py). The replays are independent:
    with an `executor` (local processes, or a Dask cluster's) they run there at once, each
    reported done as it ends; without, one after the other here."""
    result = Comparison(
        trace_name,
        len(jobs),
        onprem,
        seed,
        slack,
        policy.spec.limits.currency,
        lower_bound(jobs, sum(onprem.values()), config, policy, catalog),
        margin=policy.spec.trigger.deadline_safety_margin,
        margin_share=policy.spec.trigger.deadline_safety_share,
        runtime_share=policy.spec.trigger.deadline_runtime_share,
    )
    chosen = policies(config, policy, catalog, jobs, include_baselines=include_baselines)
    replays = [_Replay(p.name, p, config, ("outcome",)) for p in chosen]
    if optimum:
        result.windows = windows.reference(
            jobs,
            sum(onprem.values()),
            pricer(config, policy, catalog),
            optimum,
            progress=_told(progress, "windowed optimum"),
        )
    if sweep:
        name = policy.metadata.name
        for knob in SWEEP:
            varied = with_margin(config, name, knob)
            label = f"burst, margin {format_duration(knob)}"
            replays.append(_Replay(label, simulate.Burst(varied), varied, ("sweep", "burst", knob)))
            for base in (
                baselines.constant_wait(config, policy, catalog, knob),
                baselines.compute_wait(config, policy, catalog, jobs, knob),
            ):
                label = f"{base.name}, wait {format_duration(knob)}"
                replays.append(_Replay(label, base, config, ("sweep", base.name, knob)))
        for price in PRICES:
            varied = with_trigger(config, name, wait_price=price)
            label = f"burst, wait price {price}"
            replays.append(_Replay(label, simulate.Burst(varied), varied, ("price", price)))
    if executor is None:
        outcomes = [
            _replay(r, jobs, onprem, catalog, seed, clouds, runtimes, _told(progress, r.label))
            for r in replays
        ]
    else:
        futures = {
            executor.submit(_replay, r, jobs, onprem, catalog, seed, clouds, runtimes): r
            for r in replays
        }
        for done in as_completed(futures):
            if progress:
                progress(futures[done].label, 1.0)
        outcomes = [f.result() for f in futures]
    for r, outcome in zip(replays, outcomes, strict=True):
        if r.slot[0] == "outcome":
            result.outcomes.append(outcome)
        elif r.slot[0] == "sweep":
            result.sweep.append((r.slot[1], r.slot[2], outcome))
        else:
            result.prices.append((r.slot[1], outcome))
    return result


# --- rendering ------------------------------------------------------------------------------------


def _money(usd_micros: int, rate: Decimal) -> Decimal:
    return (Decimal(usd_micros) * rate / 1_000_000).quantize(Decimal("0.01"), ROUND_HALF_EVEN)


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def summary(result: Comparison, config: Config) -> dict[str, Any]:
    """The JSON object of `burst simulate --format json`."""
    rate = usd_rate(config, result.currency)
    bound_cost = Decimal(str(result.bound.cost)).quantize(Decimal("0.01"), ROUND_HALF_EVEN)

    def entry(o: Outcome) -> dict[str, Any]:
        cost = _money(o.cost_usd_micros, rate)
        return {
            "name": o.policy,
            "cost": float(cost),
            "deadlines_met": round(o.deadlines_met, 6),
            "deadlines_missed": round(o.jobs * (1 - o.deadlines_met)),
            "ratio_to_bound": round(float(cost / bound_cost), 3) if bound_cost > 0 else None,
            "mean_jct_s": round(o.mean_jct_s, 1),
            "p90_jct_s": round(o.p90_jct_s, 1),
            "mean_queue_s": round(o.mean_queue_s, 1),
            "p90_queue_s": round(o.p90_queue_s, 1),
            "idle_share": _share(o.idle_usd_micros, o.cost_usd_micros),
            "idle_empty_share": _share(o.idle_empty_usd_micros, o.cost_usd_micros),
            "overhead_share": _share(o.overhead_usd_micros, o.cost_usd_micros),
            "onprem_utilisation": round(o.onprem_utilisation, 4),
            "spend_by_provider": {k: float(_money(v, rate)) for k, v in o.by_provider.items()},
            "pools_created": o.pools_created,
            "jobs_burst": o.burst_jobs,
            "unfinished": o.unfinished,
            "decisions": o.decisions,
            "runtime_overrun_p90_s": o.overrun_p90_s,
            "runtime_overrun_share_p90": o.overrun_share_p90,
            "runtime_share_p10": o.runtime_share_p10,
        }

    out: dict[str, Any] = {
        "trace": result.trace,
        "jobs": result.jobs,
        "onprem_gpus": result.onprem,
        "seed": result.seed,
        "deadline_slack": result.slack,
        "currency": result.currency,
        "burst_margin_s": int(result.margin.total_seconds()),
        "burst_margin_share": result.margin_share,
        "burst_deadline_runtime_share": result.runtime_share,
        "lower_bound": {
            "cost": float(bound_cost),
            "cloud_gpu_hours": round(result.bound.cloud_work / 3600, 1),
        },
        "policies": [entry(o) for o in result.outcomes],
    }
    if result.windows:
        out["optimum"] = windows.summary(
            result.windows, result.outcomes, lambda micros: _money(micros, rate)
        )
    if result.sweep:
        out["sweep"] = [
            {"policy": p, "knob": format_duration(k), "knob_s": int(k.total_seconds()), **entry(o)}
            for p, k, o in result.sweep
        ] + [
            {
                "policy": "burst, wait price",
                "knob": f"{price} {result.currency}/GPU-h",
                "wait_price": float(price),
                **entry(o),
            }
            for price, o in result.prices
        ]
    return out


def render(result: Comparison, config: Config, fmt: Format) -> str:
    data = summary(result, config)
    if fmt == "json":
        return json.dumps(data, indent=2)
    if fmt == "html":
        return _html(data)
    return _table(data)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def _table(data: dict[str, Any]) -> str:
    cur = data["currency"]
    lines = [
        f"{data['trace']}: {data['jobs']} jobs, on-prem {data['onprem_gpus']}, seed {data['seed']}, "
        f"deadline slack {data['deadline_slack']}",
        f"lower bound on cloud cost: {data['lower_bound']['cost']:.2f} {cur} "
        f"({data['lower_bound']['cloud_gpu_hours']} cloud GPU-hours)",
        "",
        f"{'policy':<14}{'cost ' + cur:>14}{'x bound':>9}{'deadlines':>11}{'mean JCT':>11}"
        f"{'p90 JCT':>11}{'mean wait':>11}{'idle':>7}{'overhead':>9}{'pools':>7}",
    ]
    for p in data["policies"]:
        ratio = "-" if p["ratio_to_bound"] is None else f"{p['ratio_to_bound']:.2f}"
        lines.append(
            f"{p['name']:<14}{p['cost']:>14,.2f}{ratio:>9}{p['deadlines_met']:>11.2%}"
            f"{_hours(p['mean_jct_s']):>11}{_hours(p['p90_jct_s']):>11}"
            f"{_hours(p['mean_queue_s']):>11}{p['idle_share']:>7.0%}{p['overhead_share']:>9.0%}"
            f"{p['pools_created']:>7}"
        )
    if "optimum" in data:
        lines += windows.table(data["optimum"], cur)
    for row in data.get("sweep", []):
        if row is data["sweep"][0]:
            lines += [
                "",
                "sweep (knob: burst's safety margin or its price on waiting, the baselines' wait "
                "budget):",
            ]
        lines.append(
            f"  {row['policy']:<18}{row['knob']:>16}"
            f"{row['cost']:>14,.2f} {cur}  mean JCT {_hours(row['mean_jct_s'])}  "
            f"deadlines {row['deadlines_met']:.2%}"
        )
    return "\n".join(lines)


def _bars(data: dict[str, Any]) -> str:
    """Each policy's cost as a multiple of the bound, labelled with its deadlines met."""
    rows = [p for p in data["policies"] if p["ratio_to_bound"] is not None]
    width, pad, bar = 640, 130, 26
    height = 40 + bar * len(rows)
    peak = max((p["ratio_to_bound"] for p in rows), default=1) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="cost as a multiple of the lower bound"><title>cost / lower bound</title>'
    ]
    for i, p in enumerate(rows):
        w = (width - pad - 120) * p["ratio_to_bound"] / peak
        y = 20 + i * bar
        parts.append(
            f'<text x="{pad - 8}" y="{y + 15}" font-size="12" text-anchor="end">'
            f'{html.escape(p["name"])}</text><rect class="bar" x="{pad}" y="{y}" width="{w:.1f}" '
            f'height="{bar - 6}" fill="{PALETTE[i % len(PALETTE)]}"/><text x="{pad + w + 6:.1f}" '
            f'y="{y + 15}" font-size="12">{p["ratio_to_bound"]:.2f} x, '
            f"{p['deadlines_met']:.1%} met</text>"
        )
    return "".join(parts) + "</svg>"


def _curves(data: dict[str, Any]) -> str:
    """The sweep: cost against mean job completion time, one line per policy."""
    series: dict[str, list[tuple[float, float]]] = {}
    for row in data.get("sweep", []):
        series.setdefault(row["policy"], []).append((row["mean_jct_s"] / 3600, row["cost"]))
    if not series:
        return ""
    width, height, pad = 640, 320, 60
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y1 = max(ys) or 1.0

    def at(x: float, y: float) -> str:
        px = pad + (width - 2 * pad) * (x - x0) / (x1 - x0)
        py = height - pad - (height - 2 * pad) * y / y1
        return f"{px:.1f},{py:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="cost against mean job completion time"><title>cost vs mean JCT</title>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="#333"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#333"/>',
        f'<text x="{width / 2}" y="{height - 20}" font-size="12" text-anchor="middle">'
        f"mean job completion time (h), {x0:.2f} to {x1:.2f}</text>",
        f'<text x="14" y="{pad - 14}" font-size="12">cost {html.escape(data["currency"])}, '
        f"0 to {y1:,.0f}</text>",
    ]
    for j, (name, pts) in enumerate(sorted(series.items())):
        color = PALETTE[j % len(PALETTE)]
        points = " ".join(at(x, y) for x, y in sorted(pts))
        parts.append(
            f'<polyline class="curve" fill="none" stroke="{color}" stroke-width="2" '
            f'points="{points}"><title>{html.escape(name)}</title></polyline>'
            f'<text x="{width - pad - 110}" y="{pad + j * 14}" font-size="11" fill="{color}">'
            f"{html.escape(name)}</text>"
        )
    return "".join(parts) + "</svg>"


def _html(data: dict[str, Any]) -> str:
    cur = html.escape(data["currency"])
    head = "".join(
        f"<th>{c}</th>"
        for c in (
            "policy",
            f"cost {cur}",
            "x bound",
            "deadlines met",
            "mean JCT",
            "p90 JCT",
            "mean wait",
            "idle",
            "overhead",
            "pools",
        )
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                p["name"],
                f"{p['cost']:,.2f}",
                "-" if p["ratio_to_bound"] is None else f"{p['ratio_to_bound']:.2f}",
                f"{p['deadlines_met']:.2%}",
                _hours(p["mean_jct_s"]),
                _hours(p["p90_jct_s"]),
                _hours(p["mean_queue_s"]),
                f"{p['idle_share']:.0%}",
                f"{p['overhead_share']:.0%}",
                p["pools_created"],
            )
        )
        + "</tr>"
        for p in data["policies"]
    )
    title = html.escape(f"burst simulate: {data['trace']}")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>"
        f"<h1>{title}</h1><p>{data['jobs']} jobs, on-prem {html.escape(str(data['onprem_gpus']))}, "
        f"seed {data['seed']}, deadline slack {html.escape(data['deadline_slack'])}. Lower bound "
        f"on cloud cost: {data['lower_bound']['cost']:,.2f} {cur}.</p>"
        f"<table><tr>{head}</tr>{rows}</table>"
        + (
            f"<h2>Cost as a multiple of the lower bound</h2>{_bars(data)}"
            if any(p["ratio_to_bound"] is not None for p in data["policies"])
            else "<p>The lower bound is 0 (every deadline could be met without a cloud), so no "
            "cost is a multiple of it: no chart.</p>"
        )
        + (windows.section(data["optimum"], data["currency"]) if "optimum" in data else "")
        + (
            f"<h2>Cost against mean job completion time (sweep)</h2>{_curves(data)}"
            if data.get("sweep")
            else ""
        )
        + "</body></html>"
    )
