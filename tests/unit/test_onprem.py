"""onprem.py: the strict-FIFO estimate of when a pending workload would start on-prem."""

from __future__ import annotations

from datetime import timedelta

from burst.decide.onprem import estimate_all
from burst.model import OnPrem, RunningWorkload
from tests.builders import NOW, workload

H = timedelta(hours=1)


def test_a_wide_job_waits_for_enough_releases_and_blocks_those_behind() -> None:
    # 5 V100s: two 1-GPU runs end at +1 h and +2 h, a 2-GPU run at +3 h; 1 GPU is free now.
    onprem = OnPrem(
        {"V100": 5},
        (
            RunningWorkload("r1", "V100", 1, NOW + H),
            RunningWorkload("r2", "V100", 1, NOW + 2 * H),
            RunningWorkload("r3", "V100", 2, NOW + 3 * H),
        ),
    )
    # Created first, the wide one is ahead; it needs r1's and r2's GPUs too: +2 h.
    wide = workload("wide", gpus_per_pod=3, created=NOW - 2 * H)
    small = workload("small", gpus_per_pod=1)
    runtimes = {"wide": H, "small": H}
    est = estimate_all(onprem, [wide, small], runtimes, NOW)
    assert (est["wide"].start, est["wide"].finish) == (NOW + 2 * H, NOW + 3 * H)
    # The free GPU went to the wide job: the small one waits for r3, though it fits now.
    assert est["small"].start == NOW + 3 * H
    # Without the wide one, the small one takes the free GPU now.
    est = estimate_all(onprem, [wide, small], runtimes, NOW, frozenset({"wide"}))
    assert est["small"].start == NOW


def test_a_run_past_its_estimate_holds_its_gpus_for_as_long_again() -> None:
    # All 4 V100s run a job started 3 h ago and expected to end 1 h ago: it was taken to end now,
    # so the job behind it looked about to start on every pass while it kept running.
    late = RunningWorkload("r", "V100", 4, NOW - H, started=NOW - 3 * H)
    est = estimate_all(OnPrem({"V100": 4}, (late,)), [workload("next")], {"next": H}, NOW)
    assert est["next"].start == NOW + 3 * H
    # Without a start (nothing known of it), and before its estimate, nothing changes.
    unknown = RunningWorkload("r", "V100", 4, NOW - H)
    est = estimate_all(OnPrem({"V100": 4}, (unknown,)), [workload("next")], {"next": H}, NOW)
    assert est["next"].start == NOW
    on_time = RunningWorkload("r", "V100", 4, NOW + H, started=NOW - 3 * H)
    est = estimate_all(OnPrem({"V100": 4}, (on_time,)), [workload("next")], {"next": H}, NOW)
    assert est["next"].start == NOW + H
