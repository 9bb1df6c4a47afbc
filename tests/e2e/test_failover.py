"""A leader replaced in the middle of a pass, at each step boundary in turn: the new leader takes the
next epoch and carries on from the database and the clusters, while the old one finishes its pass
without knowing. Its commits are refused by the fencing epoch, and nothing is done twice: one
remote run per workload, every pool created once in the cloud, none left running, a complete
ledger. The runs are on a FakeClock, as in test_crash.py. (tests/e2e/test_serve.py shows the
Lease changing hands between two processes.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from burst import demo
from burst.clock import FakeClock

# Boundaries after which the old leader still has a write to make in the same pass.
POINTS = ("pool-created-in-cloud", "remote-created", "outcome-recorded", "pool-deleted-in-cloud")


@pytest.mark.parametrize("point", POINTS)
def test_a_leader_replaced_mid_pass_does_nothing_twice(point: str, tmp_path: Path) -> None:
    boards = []  # what `burst demo` shows live, pass by pass, through the handover
    summary = demo.run(
        seconds=60,
        workdir=tmp_path,
        quick=True,
        failover_at=point,
        clock=FakeClock(),
        on_pass=lambda run, _: boards.append(demo.board(run)),
    )
    shown = {(job, state, where) for jobs, _ in boards for job, state, where in jobs}
    assert any(job == "cms-ml/tight-0" and where.startswith("sim-") for job, _, where in shown)
    assert {state for _, pools in boards for _, state, _ in pools} >= {"ready", "deleted"}
    assert summary["refused_commits"] >= 1, "the old leader was never fenced"
    jobs = {j["job"]: j for j in summary["jobs"]}
    for name in ("cms-ml/tight-0", "cms-ml/tight-1"):
        assert jobs[name]["ran"].startswith("sim-"), jobs[name]
        assert jobs[name]["state"] == "succeeded", jobs[name]
    assert summary["jobs_run_twice"] == 0
    assert summary["pools_created_in_clouds"] == summary["pools_created"]
    assert summary["pools_left_running"] == 0
    assert float(summary["spend_usd"]) > 0
