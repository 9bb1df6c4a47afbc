"""Burst against the baselines on every seed: `burst simulate --baselines` for each trace, seed,
cloud model and runtime mode asked, one Markdown row each (the tables of docs/simulate.md), and
with `--optimum N` each policy's cost against the windowed optimum too.

    python benchmarks/seeds.py [--traces openb,philly] [--seeds 1-5] [--clouds realistic,ideal]
        [--runtimes exact,noisy,learned] [--optimum 200] [--workers 2] [--wait-price 1.6]
        [--queueing BestEffortFIFO] [--margin measured|measured-share|30m|25%]
        [--wait-per-gpu-hour 64s] [--max-spot-delay 2m] [--deadline-runtime-share 0.5]
        [--idle-ttl-choice next-arrival]

A row: cost, missed deadlines and mean completion time of burst, compute-wait, constant-wait and
no-wait, then whether burst was cheaper than each at no more misses and no later mean completion
("yes"), cheaper with more misses or later ("cheaper"), or not cheaper ("no").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ("starburst", "compute-wait", "constant-wait", "no-wait")


def seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def run(
    trace: str,
    seed: int,
    clouds: str,
    runtimes: str,
    optimum: int,
    workers: int,
    knobs: list[str],
) -> dict[str, Any]:
    argv = [sys.executable, "-m", "burst", "simulate", "--trace", trace, "-c"]
    argv += [str(ROOT / "docs" / "examples" / "simulate"), "--baselines", "--format", "json"]
    argv += ["--seed", str(seed), "--clouds", clouds, "--runtimes", runtimes]
    argv += ["--workers", str(workers)] + (["--optimum", str(optimum)] if optimum else [])
    argv += knobs
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def verdict(burst: dict[str, Any], other: dict[str, Any]) -> str:
    if burst["cost"] >= other["cost"]:
        return "no"
    no_worse = (
        burst["deadlines_missed"] <= other["deadlines_missed"]
        and burst["mean_jct_s"] <= other["mean_jct_s"]
    )
    return "yes" if no_worse else "cheaper"


def row(trace: str, seed: int, clouds: str, runtimes: str, result: dict[str, Any]) -> str:
    by = {p["name"]: p for p in result["policies"]}
    share = result["burst_margin_share"]
    margin = f"{share * 100:g} %" if share else f"{result['burst_margin_s'] // 60} min"
    cells = [trace, clouds, runtimes, str(seed), margin]
    for name in ("burst", *BASELINES):
        p = by[name]
        cells += [
            f"{p['cost']:,.2f}",
            str(p["deadlines_missed"]),
            f"{p['mean_jct_s'] / 3600:.2f} h",
        ]
    cells += [verdict(by["burst"], by[name]) for name in BASELINES]
    if "optimum" in result:
        o = result["optimum"]
        b = o["by_policy"]["burst"]
        c = o["by_policy"]["compute-wait"]
        cells += [
            f"{o['cost']:,.2f}",
            "-" if b["ratio"] is None else f"{b['ratio']:.1f}",
            "-" if c["ratio"] is None else f"{c['ratio']:.1f}",
            "-" if b["median_window"] is None else f"{b['median_window']:.1f}",
            "-" if b["worst_window"] is None else f"{b['worst_window']:.1f}",
        ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default="openb,philly")
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--clouds", default="realistic,ideal")
    parser.add_argument("--runtimes", default="exact,noisy,learned")
    parser.add_argument("--optimum", type=int, default=0, help="jobs per window (0: none)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--wait-price", default="", help="burst's trigger.waitPrice (per GPU-h)")
    parser.add_argument("--queueing", default="", help="the on-prem cluster's (onPrem.queueing)")
    parser.add_argument(
        "--margin", default="", help="burst's margin: 30m, 25%%, measured or measured-share"
    )
    parser.add_argument("--wait-per-gpu-hour", default="", help="burst's trigger.waitPerGpuHour")
    parser.add_argument("--max-spot-delay", default="", help="burst's placement.maxSpotDelay")
    parser.add_argument(
        "--deadline-runtime-share", default="", help="burst's trigger.deadlineRuntimeShare"
    )
    parser.add_argument("--idle-ttl-choice", default="", help="burst's teardown.idleTtlChoice")
    args = parser.parse_args()
    knobs = [
        f"--{name.replace('_', '-')}={value}"
        for name in (
            "wait_price",
            "queueing",
            "margin",
            "wait_per_gpu_hour",
            "max_spot_delay",
            "deadline_runtime_share",
            "idle_ttl_choice",
        )
        if (value := getattr(args, name))
    ]
    head = ["trace", "clouds", "runtimes", "seed", "burst margin"]
    for name in ("burst", *BASELINES):
        head += [f"{name} cost", "missed", "mean JCT"]
    head += [f"cheaper than {name}" for name in BASELINES]
    if args.optimum:
        head += ["optimum", "burst x opt", "compute-wait x opt", "burst median", "burst worst"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for trace in args.traces.split(","):
        for clouds in args.clouds.split(","):
            for runtimes in args.runtimes.split(","):
                for seed in seeds(args.seeds):
                    started = time.perf_counter()
                    result = run(
                        trace,
                        seed,
                        clouds,
                        runtimes,
                        args.optimum,
                        args.workers,
                        knobs,
                    )
                    print(row(trace, seed, clouds, runtimes, result), flush=True)
                    took = time.perf_counter() - started
                    print(f"{trace} {clouds} {runtimes} {seed}: {took:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
