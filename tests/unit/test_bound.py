"""bound.py: the lower bound on cloud cost, on cases whose optimum is known by hand, and its
maximum flow against a linear program over unit time slots."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from burst.sim.bound import BoundJob, grid_step, lower_bound, onprem_work


def job(release: int, deadline: int, work: int, price: float, width: int = 64) -> BoundJob:
    return BoundJob(release, deadline, work, price, width)


def test_the_tighter_window_goes_first_and_both_fit() -> None:
    # One GPU. A (window 0-3, 2 GPU-s) and B (window 0-1, 1 GPU-s): B first, then A: all 3 fit.
    jobs = [job(0, 3, 2, 1.0), job(0, 1, 1, 1.0)]
    assert onprem_work(jobs, 1) == pytest.approx(3)
    assert lower_bound(jobs, 1).cost == pytest.approx(0)


def test_the_expensive_work_stays_on_prem() -> None:
    # One GPU for 2 s, two jobs of 2 GPU-s in the same window: one must go to a cloud, and the
    # optimum sends the one whose cloud price is lower (1 per GPU-s): cost 2.
    bound = lower_bound([job(0, 2, 2, 2.0), job(0, 2, 2, 1.0)], 1)
    assert bound.cost == pytest.approx(2.0)
    assert bound.cloud_work == pytest.approx(2.0)


def test_work_past_every_deadline_goes_to_a_cloud() -> None:
    # Two GPUs, 10 s: 20 GPU-s of room; 30 GPU-s due by t=10, priced 3 per GPU-s: 10 to a cloud.
    jobs = [job(0, 10, 10, 3.0), job(5, 10, 20, 3.0)]
    assert lower_bound(jobs, 2).cost == pytest.approx(30.0)
    # Released later, the second job has only 5 s; the first fills 0-5 alone at full width.
    assert onprem_work(jobs, 2) == pytest.approx(20.0)


def test_a_job_runs_on_no_more_gpus_than_it_asks_for() -> None:
    # Two idle GPUs for 4 s, one job of 1 GPU needing 6 GPU-s: on one GPU it does 4 on-prem, the
    # other 2 GPU-s go to a cloud at 5 per GPU-s. Without the width cap all 6 would fit.
    jobs = [job(0, 4, 6, 5.0, width=1)]
    assert onprem_work(jobs, 2) == pytest.approx(4)
    assert lower_bound(jobs, 2).cost == pytest.approx(10.0)
    assert onprem_work([job(0, 4, 6, 5.0, width=2)], 2) == pytest.approx(6)


def test_no_on_prem_means_everything_in_a_cloud() -> None:
    jobs = [job(0, 10, 5, 2.0), job(3, 4, 1, 1.0)]
    assert lower_bound(jobs, 0).cost == pytest.approx(11.0)


def test_a_coarse_grid_can_only_lower_the_bound() -> None:
    rng = random.Random(7)
    jobs = []
    for _ in range(200):
        release = rng.randint(0, 20_000)
        jobs.append(job(release, release + rng.randint(60, 4_000), rng.randint(60, 8_000), 1.0, 2))
    exact = onprem_work(jobs, 4, step=1)
    assert exact <= onprem_work(jobs, 4, step=300) <= onprem_work(jobs, 4, step=3600)
    assert grid_step(jobs[:3]) == 1


def _slots(jobs: list[BoundJob], gpus: int) -> float:
    """The same maximum as a linear program over unit time slots, solved by HiGHS: x[j, t] is
    job j's work in second t, at most its width, within its window; each second has `gpus`."""
    horizon = max(j.deadline for j in jobs)
    cells = [(i, t) for i, j in enumerate(jobs) for t in range(j.release, j.deadline)]
    per_job = np.zeros((len(jobs), len(cells)))
    per_slot = np.zeros((horizon, len(cells)))
    for k, (i, t) in enumerate(cells):
        per_job[i, k] = 1
        per_slot[t, k] = 1
    result = linprog(
        -np.ones(len(cells)),
        A_ub=np.vstack([per_job, per_slot]),
        b_ub=[j.work for j in jobs] + [gpus] * horizon,
        bounds=[(0, jobs[i].width) for i, _ in cells],
        method="highs",
    )
    assert result.success
    return float(-result.fun)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_onprem_work_matches_unit_slots(seed: int) -> None:
    rng = random.Random(seed)
    jobs = []
    for _ in range(rng.randint(1, 8)):
        release = rng.randint(0, 10)
        width = rng.randint(1, 4)
        jobs.append(job(release, release + rng.randint(1, 8), rng.randint(1, 12), 1.0, width))
    gpus = rng.randint(1, 4)
    assert onprem_work(jobs, gpus) == pytest.approx(_slots(jobs, gpus))
