"""Kill the reconcile pass at every boundary between an intent and its action, restart it with
nothing but the database and the clusters, and check that it converges: one remote copy per
workload, no pool left in a cloud, a ledger with every pool's charges. The runs are on a FakeClock
moved a second a pass: job durations, launches and idle TTLs as in `burst demo`, without waiting
for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst import demo, failpoints
from burst.clock import FakeClock


@pytest.mark.parametrize("point", failpoints.POINTS)
def test_a_pass_killed_at_any_step_converges(point: str, tmp_path: Path) -> None:
    summary = demo.run(seconds=60, workdir=tmp_path, quick=True, crash_at=point, clock=FakeClock())
    assert summary["crashes"] == 1, f"the pass never reached {point}"
    jobs = {j["job"]: j for j in summary["jobs"]}
    for name in ("cms-ml/tight-0", "cms-ml/tight-1"):
        assert jobs[name]["ran"].startswith("sim-") and jobs[name]["state"] == "succeeded", jobs[
            name
        ]
        assert jobs[name]["cost"], jobs[name]  # metered, and the job shows it
    assert summary["jobs_run_twice"] == 0
    assert summary["pools_left_running"] == 0
    assert all(p["state"] in ("deleted", "failed") for p in summary["pools"])
    assert float(summary["spend_usd"]) > 0
