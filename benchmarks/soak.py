"""The long soak: the real `burst serve` replicas on PostgreSQL fed a window of the Philly trace
under faults at a steady rate, with the invariant checker looking on (tests/soak/harness.py; the
short one runs in CI as tests/soak/test_soak.py). Prints one JSON object: load held, faults by
kind, invariant counts, the leader's memory over time, the workloads' outcomes.

    python benchmarks/soak.py [--days 14] [--start-day 10] [--jobs 2000] [--compress 720]
        [--fault-every 8] [--seed 1] [--url postgresql://postgres@127.0.0.1:5432/postgres]
        [--workdir DIR] [--no-kills] [--heap] [--ttl SECONDS] [--budget USD]

At 720x a trace hour passes in 5 s: two weeks of trace in 28 minutes, then the drain. Run it
from a checkout nobody edits meanwhile (a `git worktree`): a replica restarted after a change
runs the changed code; the report says whether the code changed during the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.soak.harness import BUDGET_MICROS, Settings, Soak, lives


def code_state() -> str:
    """The checkout's commit and a digest of its uncommitted changes and new files (a new file's
    later edits escape it, as do files git ignores)."""
    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    diff = subprocess.run(["git", "diff", "HEAD"], cwd=root, capture_output=True)
    new = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True)
    digest = hashlib.sha256(diff.stdout + new.stdout).hexdigest()[:12]
    return f"{head.stdout.strip()[:12]}+{digest}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--start-day", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--compress", type=float, default=720.0)
    parser.add_argument("--fault-every", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--url",
        default=os.environ.get(
            "BURST_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs and state here")
    parser.add_argument(
        "--no-kills",
        action="store_true",
        help="every fault but killing or pausing a replica, database outages shorter than the "
        "lease (to watch one leader's memory)",
    )
    parser.add_argument(
        "--heap",
        action="store_true",
        help="replicas under tracemalloc, writing their growing allocation sites to the workdir",
    )
    parser.add_argument(
        "--ttl",
        type=int,
        default=None,
        help="delete finished Jobs and PyTorchJobs this many seconds after they end (as production "
        "clusters do)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=BUDGET_MICROS / 1e6,
        help="theory's hard daily budget in USD (spent, it holds theory's jobs to the end)",
    )
    args = parser.parse_args()
    settings = Settings(
        seconds=args.days * 86400 / args.compress,
        jobs=args.jobs,
        start_day=args.start_day,
        compress=args.compress,
        seed=args.seed,
        fault_every=args.fault_every,
        drain=300.0,
        kills=not args.no_kills,
        heap=args.heap,
        ttl_s=args.ttl,
        budget_micros=round(args.budget * 1e6),
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="burst-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"soak: {settings.seconds:.0f} s of trace, logs in {workdir}", file=sys.stderr)
    before = code_state()
    report = Soak(workdir, args.url, settings).run()
    samples = report.memory_mib
    (workdir / "memory.csv").write_text(
        "seconds,replica,pid,rss_mib\n" + "".join(f"{a},{n},{p},{r}\n" for a, n, p, r in samples)
    )
    figures = {"bench": "soak", "days": args.days, **report.__dict__, "memory_mib": lives(samples)}
    # A replica restarted after the code changed runs the new code: such a run measures neither.
    figures["code"] = {"at_start": before, "changed_during_run": code_state() != before}
    print(json.dumps(figures, default=str), flush=True)


if __name__ == "__main__":
    main()
