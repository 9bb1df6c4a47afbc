"""decide.plan() on plans taken from a replay: the shipped config/ on the start of Philly.

The replay with config/ is slow for its plans over a backlog of thousands (docs/simulate.md,
Speed); generated snapshots (bench_plan.py) do not have its shape: most of the backlog past its
wait, a few pools at the policy's limit, a team budget spent. This replays the first `--jobs`
Philly jobs with the whole trace's on-prem size and config/, keeps every `--every`-th plan that
dispatches with at least `--least` waiting, then plans each of them again `--repeat` times, checks
each gives the same actions, and prints one JSON object per plan (the least of its runs) and a
total. The same plans come back on every run: the replay is seeded.

    python benchmarks/bench_replay_plans.py [--jobs 40000] [--every 1000] [--least 1000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from burst import config, decide
from burst.cloud import catalog
from burst.model import Action, Dispatch, Snapshot
from burst.sim import simulate, trace

ROOT = Path(__file__).resolve().parent.parent
PHILLY = ROOT / "burst" / "data" / "traces" / "microsoft-philly-2017-public.csv"


class Keeping(simulate.Burst):
    """burst's replay, keeping some of the plans it makes."""

    def __init__(self, cfg: config.Config, every: int, least: int) -> None:
        super().__init__(cfg)
        self.every, self.least, self.plans = every, least, 0
        self.kept: list[tuple[Snapshot, datetime, tuple[Action, ...]]] = []

    def decide(self, world: simulate.World) -> Sequence[Action]:
        snapshot, now = self.snapshot(world), world.dt(world.now)
        actions = decide.plan(snapshot, world.catalog, self.config, now, skips=False).actions
        self.plans += 1
        dispatches = any(isinstance(a, Dispatch) for a in actions)
        if dispatches and len(snapshot.workloads) >= self.least and self.plans % self.every == 0:
            self.kept.append((snapshot, now, actions))
        return actions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--least", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    shipped = catalog.shipped()
    cfg = config.load(
        [ROOT / "config"], config.Vocabulary(shipped.regions(), shipped.accelerators())
    )
    assert cfg.service is not None
    offers = shipped.with_overrides(cfg.service.spec.catalog)
    policy = simulate.policy_of(cfg)
    raw = trace.read(PHILLY)
    jobs = trace.derive(
        raw[: args.jobs], teams=policy.spec.selector.namespaces, slack=(1.5, 4.0), seed=1
    )
    keeping = Keeping(cfg, args.every, args.least)
    started = time.perf_counter()
    simulate.World(jobs, {"V100": trace.onprem_gpus(raw)}, cfg, offers, seed=1).run(keeping)
    replay_s = time.perf_counter() - started
    total = 0.0
    for number, (snapshot, now, actions) in enumerate(keeping.kept, 1):
        runs = []
        for _ in range(args.repeat):
            began = time.perf_counter()
            again = decide.plan(snapshot, offers, cfg, now, skips=False).actions
            runs.append(time.perf_counter() - began)
            assert again == actions, f"plan {number} planned otherwise the second time"
        total += min(runs)
        print(
            json.dumps(
                {
                    "benchmark": "replay_plans",
                    "plan": number,
                    "waiting": len(snapshot.workloads),
                    "dispatches": sum(isinstance(a, Dispatch) for a in actions),
                    "least_ms": round(min(runs) * 1000, 1),
                }
            )
        )
    print(
        json.dumps(
            {
                "benchmark": "replay_plans",
                "jobs": len(jobs),
                "plans_in_replay": keeping.plans,
                "plans_kept": len(keeping.kept),
                "replay_s": round(replay_s, 1),
                "total_least_ms": round(total * 1000, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
