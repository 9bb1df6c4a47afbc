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
