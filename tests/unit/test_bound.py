"""bound.py: the lower bound on cloud cost, on cases whose optimum is known by hand."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burst.bound import BoundJob, lower_bound, onprem_work


def test_earliest_deadline_first_fits_what_a_worse_order_would_not() -> None:
    # One GPU. A (window 0-3, 2 GPU-s) and B (window 0-1, 1 GPU-s): B first, then A: all 3 fit.
    jobs = [BoundJob(0, 3, 2, 1.0), BoundJob(0, 1, 1, 1.0)]
    assert onprem_work(jobs, 1) == pytest.approx(3)
    assert lower_bound(jobs, 1).cost == pytest.approx(0)


def test_the_expensive_work_stays_on_prem() -> None:
    # One GPU for 2 s, two jobs of 2 GPU-s in the same window: one must go to a cloud, and the
    # optimum sends the one whose cloud price is lower (1 per GPU-s): cost 2.
    bound = lower_bound([BoundJob(0, 2, 2, 2.0), BoundJob(0, 2, 2, 1.0)], 1)
    assert bound.cost == pytest.approx(2.0)
    assert bound.cloud_work == pytest.approx(2.0)


def test_work_past_every_deadline_goes_to_a_cloud() -> None:
    # Two GPUs, 10 s: 20 GPU-s of room; 30 GPU-s due by t=10, priced 3 per GPU-s: 10 to a cloud.
    jobs = [BoundJob(0, 10, 10, 3.0), BoundJob(5, 10, 20, 3.0)]
    assert lower_bound(jobs, 2).cost == pytest.approx(30.0)
    # Released later, the second job has only 5 s; the first fills 0-5 alone at full width.
    assert onprem_work(jobs, 2) == pytest.approx(20.0)


def test_no_on_prem_means_everything_in_a_cloud() -> None:
    jobs = [BoundJob(0, 10, 5, 2.0), BoundJob(3, 4, 1, 1.0)]
    assert lower_bound(jobs, 0).cost == pytest.approx(11.0)


def _slots(jobs: list[BoundJob], gpus: int) -> float:
    """The same maximum by brute force: unit time slots, each job a greedy by deadline over the
    slots in its window (exact for integer data with unit slots: a transportation problem that
    earliest-deadline-first solves slot by slot)."""
    horizon = max(j.deadline for j in jobs)
    left = {i: j.work for i, j in enumerate(jobs)}
    done = 0
    for t in range(horizon):
        room = gpus
        for i in sorted(left, key=lambda i: jobs[i].deadline):
            j = jobs[i]
            if j.release <= t < j.deadline and room and left[i]:
                take = min(room, left[i])
                left[i] -= take
                room -= take
                done += take
    return done


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_onprem_work_matches_unit_slots(seed: int) -> None:
    rng = random.Random(seed)
    jobs = []
    for _ in range(rng.randint(1, 8)):
        release = rng.randint(0, 10)
        jobs.append(BoundJob(release, release + rng.randint(1, 8), rng.randint(1, 12), 1.0))
    gpus = rng.randint(1, 4)
    assert onprem_work(jobs, gpus) == pytest.approx(_slots(jobs, gpus))
