"""`burst demo`: the whole flow on sandbox clusters and simulated clouds.

The demo's jobs are followed to the end on a FakeClock (a second a pass, as `burst demo` sleeps
between passes), so that what they show does not depend on how busy the machine is; the command
itself, as the README gives it, runs on the wall clock for a couple of seconds (in-process: the
same command without paying for a fresh interpreter's imports)."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from typer.testing import CliRunner

from burst import demo
from burst.cli.main import app
from burst.clock import FakeClock


def test_the_demo_bursts_refuses_tears_down_and_accounts(tmp_path: Path) -> None:
    summary = demo.run(seconds=90, workdir=tmp_path / "demo", clock=FakeClock())
    jobs = {j["job"]: j for j in summary["jobs"]}
    assert summary["pools_left_running"] == 0 and summary["jobs_run_twice"] == 0
    assert summary["pools_created"] >= 1 and all(
        p["state"] in ("deleted", "failed") for p in summary["pools"]
    )
    burst = [j for j in jobs.values() if j["ran"].startswith("sim-")]
    assert burst and all(j["state"] == "succeeded" and j["cost"] for j in burst)
    assert jobs["atlas-ml/tracking-ddp"]["ran"].startswith(
        "sim-"
    )  # no A100 on-prem: only a cloud can run it
    assert "hostPath" in jobs["atlas-ml/hostile"]["why"]
    assert "budget theory-monthly" in jobs["theory/over-budget"]["why"]
    assert jobs["atlas-ml/not-burstable"]["ran"] == "on-prem"
    assert "deadline met on-prem" in jobs["atlas-ml/loose-deadline"]["why"]
    by_team = sum(Decimal(v) for v in summary["spend_by_team"].values())
    assert by_team == Decimal(summary["spend_usd"]) > 0  # the spend is the ledger's total
    # What no job used is the pools' own, charged to the policy's team, and said so.
    assert sum(Decimal(v) for v in summary["spend_by_kind"].values()) == by_team
    assert summary["pool_teams"] == ["ml-platform"]
    assert Path(summary["report"]).read_text().count("<svg") == 2
    # Everything settled before the demo's time ran out (counted on its clock, not the machine's).
    assert summary["seconds"] < 90


def test_burst_demo_shows_the_run_and_leaves_nothing_running(tmp_path: Path) -> None:
    """The README's command, stopped after 2 s: whatever it reached, the live view and the summary
    are printed, the pools it asked for are torn down, and the report is written."""
    workdir = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--seconds", "2", "--workdir", str(workdir)])
    assert result.exit_code == 0, result.output[-3000:]
    assert re.search(r"workloads after \d+ passes", result.stderr)  # the live view
    assert "burst demo:" in result.stdout and "atlas-ml/tracking-ddp" in result.stdout
    assert "left running: 0; jobs run twice: 0" in result.stdout
    assert f"report: {workdir / 'report.html'}" in result.stdout
    assert (workdir / "report.html").read_text().count("<svg") == 2
