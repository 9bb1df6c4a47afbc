"""Simulation speed: `burst simulate`'s replay of burst's own policy on each shipped trace and on a
larger trace made by resampling Philly, in jobs per second of wall time.

The simulation configuration in docs/examples/simulate, seed 1, deadline slack uniform:1.5:4, the
default on-prem size. Prints one JSON object per trace:

    python benchmarks/bench_simulate.py [--traces openb,philly,philly-100k]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from burst import catalog, config, simulate, trace

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "burst" / "data" / "traces"
FILES = {
    "openb": "alibaba-openb-2023-public.csv",
    "philly": "microsoft-philly-2017-public.csv",
}


def resampled(jobs: list[trace.TraceJob], count: int, seed: int) -> list[trace.TraceJob]:
    """`count` jobs drawn from `jobs` with their sizes and durations, arriving at the same rate."""
    rng = random.Random(seed)
    span = jobs[-1].submit - jobs[0].submit
    horizon = span * count / len(jobs)
    out = []
    for i in range(count):
        j = rng.choice(jobs)
        out.append(
            trace.TraceJob(f"r{i}", int(rng.uniform(0, horizon)), j.duration, j.gpus, j.owner)
        )
    out.sort(key=lambda j: (j.submit, j.job_id))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default="openb,philly,philly-100k")
    args = parser.parse_args()
    shipped = catalog.shipped()
    cfg = config.load(
        [ROOT / "docs" / "examples" / "simulate"],
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
            allowance_s=simulate.deadline_allowance(cfg, policy),
            slack=(1.5, 4.0),
            seed=1,
        )
        gpus = trace.onprem_gpus(raw)
        world = simulate.World(jobs, {"V100": gpus}, cfg, offers, seed=1)
        started = time.perf_counter()
        outcome = world.run(simulate.Burst(cfg))
        seconds = time.perf_counter() - started
        print(
            json.dumps(
                {
                    "benchmark": "simulate",
                    "trace": name,
                    "jobs": len(jobs),
                    "onprem_gpus": gpus,
                    "seconds": round(seconds, 2),
                    "jobs_per_second": round(len(jobs) / seconds),
                    "decisions": outcome.decisions,
                    "ms_per_decision": round(1000 * seconds / max(outcome.decisions, 1), 2),
                    "deadlines_met": round(outcome.deadlines_met, 4),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
