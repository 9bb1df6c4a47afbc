"""windows.py: the windowed optimum carries each window's on-prem plan into the next, and a
policy's bill is shared out over the windows whole."""

from __future__ import annotations

from decimal import Decimal

import pytest

from burst.sim.state import Outcome
from burst.sim.trace import SimJob
from burst.sim.windows import reference, summary, window_costs

H = 3600


def job(i: int, submit: int, duration: int, gpus: int, deadline: int) -> SimJob:
    return SimJob(str(i), submit, duration, gpus, 1, gpus, deadline, "t")


def outcome(cost: int, per_job: dict[str, int]) -> Outcome:
    return Outcome(
        "p", 4, cost, 0, 0, 0, {}, 0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, job_usd_micros=per_job
    )


def test_a_window_plans_on_what_the_earlier_windows_leave_free() -> None:
    # Two GPUs. Window one: a 2-GPU job due at 2 h that can only start at once; window two: a
    # 1-GPU job due within the hour. Alone, each fits; after the first, the second cannot.
    jobs = [job(0, 0, 2 * H, 2, 2 * H), job(1, 60, H - 60, 1, H)]
    windows = reference(jobs, 2, lambda _pod: 1.0, size=1)
    assert [w.best.cost for w in windows] == [0, pytest.approx(H - 60)]
    assert reference(jobs[1:], 2, lambda _pod: 1.0, size=1)[0].best.cost == 0


def test_a_job_that_can_wait_waits_for_the_gpus_the_last_window_held() -> None:
    jobs = [job(0, 0, H, 2, H), job(1, 0, H, 2, 3 * H)]
    windows = reference(jobs, 2, lambda _pod: 1.0, size=1)
    assert [w.best.cost for w in windows] == [0, 0]
    assert windows[1].best.starts[0] * windows[1].step >= H


def test_a_bill_is_shared_out_over_the_windows_in_proportion_to_their_jobs_usage() -> None:
    jobs = [job(i, 0, H, 1, 2 * H) for i in range(6)]
    windows = reference(jobs, 0, lambda _pod: 1.0, size=2)  # no on-prem: every job to a cloud
    # Jobs 0, 2 and 4 ran in a cloud for 100, 300 and 300; the pools' idle and overhead (300)
    # follow them, in shares that do not divide evenly: the windows still add up to the bill.
    bill = outcome(1000, {"0": 100, "2": 300, "4": 300})
    costs = window_costs(bill, windows)
    assert costs == [142, 428, 430] and sum(costs) == 1000
    data = summary(windows, [bill], Decimal)
    assert data["windows_needing_a_cloud"] == 3 and data["cost"] == pytest.approx(6 * H)
    assert data["by_policy"]["p"]["worst_window"] == pytest.approx(430 / (2 * H), abs=1e-3)
    # Nothing ran in a cloud, yet the pools were paid for: the last window carries it.
    assert window_costs(outcome(50, {}), windows) == [0, 0, 50]
