"""`burst demo --format json`: the whole flow on sandbox clusters and simulated clouds."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from tests.conftest import ROOT


def test_the_demo_bursts_refuses_tears_down_and_accounts(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst",
            "demo",
            "--format",
            "json",
            "--seconds",
            "90",
            "--workdir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
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
    assert summary["seconds"] < 90
