"""Pools shared across policies: the spend, and its idle and overhead shares, of burst's replay of a
shipped trace when the example policy's three namespaces are three policies, with and without
`placement.sharePools`, beside the one policy of docs/examples/simulate.

Each of the three policies is the example policy for one namespace, with its limits (64 pools
each): what sharing changes, not what a smaller limit does. The trace's jobs and their teams are
the same in all three replays: each job falls under the policy of its namespace. Realistic clouds, seed 1,
deadline slack uniform:1.5:4, the default on-prem size, exact runtimes. Prints one JSON object per
trace and configuration.

    python benchmarks/bench_shared_pools.py [--traces openb,philly] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from burst import config
from burst.cloud import catalog
from burst.sim import simulate, trace, variants

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "burst" / "data" / "traces"
FILES = {
    "openb": "alibaba-openb-2023-public.csv",
    "philly": "microsoft-philly-2017-public.csv",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default="openb,philly")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    shipped = catalog.shipped()
    cfg = config.load(
        [ROOT / "docs" / "examples" / "simulate"],
        config.Vocabulary(shipped.regions(), shipped.accelerators()),
    )
    assert cfg.service is not None
    offers = shipped.with_overrides(cfg.service.spec.catalog)
    teams = simulate.policy_of(cfg).spec.selector.namespaces
    (name,) = cfg.policies
    configurations = {
        "one policy": cfg,
        "a policy per namespace": variants.per_namespace(cfg, name, share=False),
        "a policy per namespace, sharing pools": variants.per_namespace(cfg, name, share=True),
    }
    for name in args.traces.split(","):
        raw = trace.read(TRACES / FILES[name])
        jobs = trace.derive(raw, teams=teams, slack=(1.5, 4.0), seed=args.seed)
        gpus = trace.onprem_gpus(raw)
        for label, configured in configurations.items():
            world = simulate.World(jobs, {"V100": gpus}, configured, offers, seed=args.seed)
            started = time.perf_counter()
            o = world.run(simulate.Burst(configured))
            cost = o.cost_usd_micros
            print(
                json.dumps(
                    {
                        "benchmark": "shared_pools",
                        "trace": name,
                        "configuration": label,
                        "cost_usd": round(cost / 1e6, 2),
                        "idle_share": round(o.idle_usd_micros / cost, 4) if cost else 0.0,
                        "overhead_share": round(o.overhead_usd_micros / cost, 4) if cost else 0.0,
                        "pools_created": o.pools_created,
                        "deadlines_met": round(o.deadlines_met, 4),
                        "mean_jct_h": round(o.mean_jct_s / 3600, 2),
                        "seconds": round(time.perf_counter() - started, 1),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
