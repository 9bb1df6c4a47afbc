"""decide.plan() on generated snapshots of 1k, 10k and 50k pending workloads.

Full shipped catalog, the example configuration in config/, 200 existing pools, budgets. Prints
one JSON object per measurement.

    python benchmarks/bench_plan.py [--sizes 1000,10000,50000] [--repeat 7]

Snapshots (seeded): 70 % burstable workloads over six namespaces, 1 to 4 pods of 1 to 8 GPUs,
V100/T4/A100/any, 60 % with deadlines; on-prem 64 V100, 32 T4, 16 A100 with 40 running workloads.
`peak_mib` is the peak of Python allocations during one plan (tracemalloc). Per workload the plan
does a constant amount of work: offers are ranked once per workload shape, the on-prem queue is a
heap per GPU product, and the pools a workload may use are cached per (policy, GPU, spot allowed).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

from burst import config, decide
from burst.amounts import Money
from burst.cloud import catalog
from burst.model import (
    BudgetView,
    OnPrem,
    PoolView,
    RunningWorkload,
    Snapshot,
    Workload,
)

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
NAMESPACES = ["cms-ml", "atlas-ml", "ml-research", "kubeflow-user-alice", "lhcb-ml", "default"]


def snapshot(
    pending: int, pools: int, offers: catalog.Catalog, cfg: config.Config, seed: int
) -> Snapshot:
    rng = random.Random(seed)
    workloads = []
    for i in range(pending):
        created = NOW - timedelta(minutes=rng.randint(0, 24 * 60))
        ns = rng.choice(NAMESPACES)
        notebook = ns.startswith("kubeflow-user")
        workloads.append(
            Workload(
                uid=f"uid-{i:06d}",
                kind=rng.choice(["Job", "Job", "PyTorchJob"]),
                namespace=ns,
                name=f"job-{i}",
                team=ns,
                gpus_per_pod=rng.choice([1, 1, 1, 2, 4, 8]),
                pods=rng.choice([1, 1, 1, 2, 4]),
                created=created,
                pending_since=created,
                accelerator=rng.choice(["V100", "V100", "T4", "A100", None]),
                burstable=rng.random() < 0.7,
                labels={"notebook-name-present": "true", "app": "jupyter"} if notebook else {},
                deadline=NOW + timedelta(minutes=rng.randint(30, 48 * 60))
                if rng.random() < 0.6
                else None,
                expected_runtime=timedelta(minutes=rng.randint(10, 12 * 60)),
                priority=rng.choice([0, 0, 0, 1]),
                cpu_per_pod=rng.choice([0.0, 4.0, 8.0]),
                memory_gib_per_pod=rng.choice([0.0, 16.0, 48.0]),
                quota_blocked=rng.random() < 0.1,
            )
        )
    capacity = {"V100": 64, "T4": 32, "A100": 16}
    running = tuple(
        RunningWorkload(
            f"run-{i}", p, rng.choice([1, 2, 4, 8]), NOW + timedelta(minutes=rng.randint(5, 600))
        )
        for i, p in enumerate(rng.choices(list(capacity), k=40))
    )
    assert cfg.service is not None
    targets = cfg.service.spec.targets
    existing = []
    for i in range(pools):
        target = targets[i % len(targets)]
        offer = rng.choice(
            offers.query(
                ["V100", "T4", "A100", "L4", "A10G"], regions={(target.cloud, target.region)}
            )
        )
        nodes = rng.randint(1, 4)
        existing.append(
            PoolView(
                name=f"pool-{i:03d}",
                target=target.name,
                policy="ml-training",
                offer=offer.key,
                nodes=nodes,
                state=rng.choice(["ready", "ready", "creating"]),
                created=NOW - timedelta(minutes=rng.randint(5, 600)),
                free_gpus=tuple(rng.randint(0, offer.gpus) for _ in range(nodes)),
            )
        )
    budgets = (
        BudgetView("cms-ml-monthly", "team", "cms-ml", Money.of("5000", "CHF")),
        BudgetView(
            "training-weekly", "policy", "ml-training", Money.of("30000", "CHF"), hard=False
        ),
    )
    return Snapshot(
        taken_at=NOW,
        workloads=tuple(workloads),
        onprem=OnPrem(capacity, running),
        pools=tuple(existing),
        budgets=budgets,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--pools", type=int, default=200)
    args = parser.parse_args()
    shipped = catalog.shipped()
    cfg = config.load(
        [ROOT / "config"], config.Vocabulary(shipped.regions(), shipped.accelerators())
    )
    assert cfg.service is not None
    offers = shipped.with_overrides(cfg.service.spec.catalog)
    for size in (int(s) for s in args.sizes.split(",")):
        snap = snapshot(size, args.pools, offers, cfg, seed=size)
        repeat = args.repeat if size <= 10_000 else max(3, args.repeat // 2)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            plan = decide.plan(snap, offers, cfg, NOW)
            times.append(time.perf_counter() - start)
        tracemalloc.start()
        decide.plan(snap, offers, cfg, NOW)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        times.sort()
        print(
            json.dumps(
                {
                    "bench": "plan",
                    "pending": size,
                    "pools": args.pools,
                    "offers": len(offers),
                    "repeat": repeat,
                    "median_s": round(statistics.median(times), 4),
                    "p95_s": round(times[min(len(times) - 1, round(0.95 * (len(times) - 1)))], 4),
                    "peak_mib": round(peak / 2**20, 1),
                    "actions": len(plan.actions),
                    "skips": len(plan.skips),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
