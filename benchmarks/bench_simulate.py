"""Simulation speed: `burst simulate`'s replay of burst's own policy on each shipped trace and on a
100,000-job trace made by resampling whole days of Philly, in jobs per second of wall time; and
Philly under the four baselines too, as `burst simulate --baselines` replays it.

The simulation configuration in docs/examples/simulate, seed 1, deadline slack uniform:1.5:4, the
default on-prem size. Prints one JSON object per trace and policy, and for a trace with baselines
one more (policy "all") with the seconds of the five replays together: what
`burst simulate --trace philly -c docs/examples/simulate --baselines` spends replaying.

    python benchmarks/bench_simulate.py [--traces openb,philly,philly-100k] [--baselines philly]
        [--config config]

`--config` replays under another configuration folder, as `burst simulate -c` does (the shipped
`config/`: each policy's share of `burst simulate --trace philly -c config/ --baselines`). Each row
says whether the decision it ran is the compiled build's (`BURST_COMPILE=1 pip install .`).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from burst import config
from burst.cloud import catalog
from burst.decide import planner
from burst.sim import compare, simulate, trace

# Whether the decision is the compiled build's (setup.py, BURST_COMPILE=1): each row says.
COMPILED = Path(planner.__file__).suffix != ".py"

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "burst" / "data" / "traces"
FILES = {
    "openb": "alibaba-openb-2023-public.csv",
    "philly": "microsoft-philly-2017-public.csv",
}


def resampled(jobs: list[trace.TraceJob], count: int, seed: int) -> list[trace.TraceJob]:
    """About `count` jobs: whole days of `jobs` drawn at random, one after another, so that the
    arrivals keep the trace's daily rhythm and bursts."""
    rng = random.Random(seed)
    day = 86_400
    days: dict[int, list[trace.TraceJob]] = {}
    for j in jobs:
        days.setdefault(j.submit // day, []).append(j)
    chosen = sorted(days)
    out: list[trace.TraceJob] = []
    while len(out) < count:
        offset = (len(out) and out[-1].submit // day + 1) * day
        picked = days[rng.choice(chosen)]
        for j in picked[: count - len(out)]:
            out.append(
                trace.TraceJob(f"r{len(out)}", offset + j.submit % day, j.duration, j.gpus, j.owner)
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default="openb,philly,philly-100k")
    parser.add_argument(
        "--baselines", default="philly", help="Traces also replayed under the four baselines."
    )
    parser.add_argument(
        "--config", default=str(ROOT / "docs" / "examples" / "simulate"), help="Configuration."
    )
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.in_process and "," in args.traces:
        # One process per trace: what one replay leaves in memory does not slow the next.
        for name in args.traces.split(","):
            command = [sys.executable, __file__, "--traces", name, "--baselines", args.baselines]
            command += ["--config", args.config]
            subprocess.run([*command, "--in-process"], check=True)
        return
    shipped = catalog.shipped()
    cfg = config.load(
        [Path(args.config)],
        config.Vocabulary(shipped.regions(), shipped.accelerators()),
    )
    assert cfg.service is not None
    offers = shipped.with_overrides(cfg.service.spec.catalog)
    policy = simulate.policy_of(cfg)
    for name in args.traces.split(","):
        if name == "philly-100k":
            raw = resampled(trace.read(TRACES / FILES["philly"]), 100_000, seed=1)
        else:
            raw = trace.read(TRACES / FILES[name])
        jobs = trace.derive(
            raw,
            teams=policy.spec.selector.namespaces,
            slack=(1.5, 4.0),
            seed=1,
        )
        gpus = trace.onprem_gpus(raw)
        # The policies in the order `burst simulate` replays them: burst's own first.
        chosen = compare.policies(
            cfg,
            policy,
            offers,
            jobs,
            include_baselines=name in args.baselines.split(","),
        )
        total = 0.0
        for p in chosen:
            world = simulate.World(jobs, {"V100": gpus}, cfg, offers, seed=1)
            started = time.perf_counter()
            outcome = world.run(p)
            seconds = time.perf_counter() - started
            total += seconds
            print(
                json.dumps(
                    {
                        "benchmark": "simulate",
                        "trace": name,
                        "policy": p.name,
                        "jobs": len(jobs),
                        "onprem_gpus": gpus,
                        "seconds": round(seconds, 2),
                        "jobs_per_second": round(len(jobs) / seconds),
                        "decisions": outcome.decisions,
                        "ms_per_decision": round(1000 * seconds / max(outcome.decisions, 1), 2),
                        "deadlines_met": round(outcome.deadlines_met, 4),
                        "compiled": COMPILED,
                    }
                ),
                flush=True,
            )
        if len(chosen) > 1:
            row = {"benchmark": "simulate", "trace": name, "policy": "all", "jobs": len(jobs)}
            print(json.dumps({**row, "onprem_gpus": gpus, "seconds": round(total, 2)}), flush=True)


if __name__ == "__main__":
    main()
