"""decide.plan() on generated snapshots of 1k, 10k and 50k pending workloads and 200 or 1,000 pools.

Full shipped catalog, the example configuration in config/, 200 or 1,000 existing pools, budgets.
Prints one JSON object per measurement; the plans of one size are timed in turn.

    python benchmarks/bench_plan.py [--sizes 1000,10000,50000] [--pools 200,1000] [--repeat 7]
        [--queueing StrictFIFO|BestEffortFIFO]

Snapshots (seeded): 70 % burstable workloads over six namespaces, 1 to 4 pods of 1 to 8 GPUs,
V100/T4/A100/any, 60 % with deadlines; on-prem 64 V100, 32 T4, 16 A100 with 40 running workloads;
the existing pools are all of the policy ml-training (at its pool limit, so its workloads reuse or
grow them), on random offers with random free GPUs. `median_s` is wall time, `cpu_s` the median
CPU time of the same plans (steadier on a busy machine); `us_per_workload` is the median per
pending workload and `x_first_pools` its ratio to the same size with the first pool count.
`peak_mib` is the peak of Python allocations during one plan (tracemalloc). Per workload the plan
does a near-constant amount of work: offers are ranked once per workload shape, the on-prem queue
is a heap per GPU product, and the open pools a workload may use are kept per (policy, GPU, spot
allowed) cheapest first, in blocks that know their most free room: a workload passes over blocks
without the room it needs and stops once every pool still ahead would cost more than the best
found. Before, it priced every such pool, and a workload took 4.5-6x as long at 1,000 pools as at
200. What still grows with the pools: setting up the plan's pools, once per plan (it shows at 1k
workloads), and the dispatches the extra room lets through.

With `--queueing BestEffortFIFO` the on-prem estimate runs the queue as Kueue's default and the
plain kube-scheduler start it (decide/firstfit.py); config/'s 6-hour wait sends most of these
workloads whatever their estimate, and a deadline at risk sends many others, each one the run
takes back to its start.

Figures from different machines differ: this benchmark's first version gave 0.39 s at 10k on an
Intel Xeon VM, the same code about twice that on the AMD EPYC VM of the later tables, and the
plan's CPU time on one machine stayed the same, within noise, through the commits in between.
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
from burst.sim.variants import with_queueing

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


def measure(
    snaps: list[Snapshot], offers: catalog.Catalog, cfg: config.Config, repeat: int
) -> list[dict[str, float | int]]:
    """Figures per snapshot, their plans timed in turn, so that a busy machine slows all alike."""
    plans = [decide.plan(snap, offers, cfg, NOW) for snap in snaps]
    walls: list[list[float]] = [[] for _ in snaps]
    cpus: list[list[float]] = [[] for _ in snaps]
    for _ in range(repeat):
        for i, snap in enumerate(snaps):
            wall, cpu = time.perf_counter(), time.process_time()
            plans[i] = decide.plan(snap, offers, cfg, NOW)
            cpus[i].append(time.process_time() - cpu)
            walls[i].append(time.perf_counter() - wall)
    rows = []
    for snap, plan, times, cpu_times in zip(snaps, plans, walls, cpus, strict=True):
        tracemalloc.start()
        decide.plan(snap, offers, cfg, NOW)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        times.sort()
        median = statistics.median(times)
        rows.append(
            {
                "median_s": round(median, 4),
                "p95_s": round(times[min(len(times) - 1, round(0.95 * (len(times) - 1)))], 4),
                "cpu_s": round(statistics.median(cpu_times), 4),
                "us_per_workload": round(median / len(snap.workloads) * 1e6, 1),
                "peak_mib": round(peak / 2**20, 1),
                "actions": len(plan.actions),
                "skips": len(plan.skips),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--pools", default="200,1000")
    parser.add_argument(
        "--queueing", default="", help="the on-prem cluster's, instead of config/'s"
    )
    args = parser.parse_args()
    shipped = catalog.shipped()
    cfg = config.load(
        [ROOT / "config"], config.Vocabulary(shipped.regions(), shipped.accelerators())
    )
    if args.queueing:
        cfg = with_queueing(cfg, args.queueing)
    assert cfg.service is not None
    offers = shipped.with_overrides(cfg.service.spec.catalog)
    pool_counts = [int(p) for p in args.pools.split(",")]
    for size in (int(s) for s in args.sizes.split(",")):
        snaps = [snapshot(size, pools, offers, cfg, seed=size) for pools in pool_counts]
        repeat = args.repeat if size <= 10_000 else max(3, args.repeat // 2)
        rows = measure(snaps, offers, cfg, repeat)
        for pools, figures in zip(pool_counts, rows, strict=True):
            row = {"bench": "plan", "pending": size, "pools": pools, "offers": len(offers)}
            row["queueing"] = cfg.service.spec.on_prem.queueing
            row |= {"repeat": repeat, **figures}
            ratio = float(figures["us_per_workload"]) / float(rows[0]["us_per_workload"])
            row["x_first_pools"] = round(ratio, 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
