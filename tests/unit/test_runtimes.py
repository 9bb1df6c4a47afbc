"""Runtimes learned from finished workloads (burst/runtimes.py), and the simulator's runtime modes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from burst import runtimes
from burst.runtimes import Learned, stem


def test_runs_of_one_job_share_a_stem() -> None:
    assert stem("train-resnet-20261130-7f3a9c") == "train-resnet"
    assert stem("train-resnet-42") == stem("train-resnet-43") == "train-resnet"
    assert stem("application_1506638472019_10271") == "application"
    assert stem("eval") == "eval"
    assert stem("train-model") == "train-model"  # a word, not a generated suffix
    assert stem("train-model-x7k2p") == "train-model"
    assert stem("fine-tune-decade") == "fine-tune-decade"


def test_an_estimate_is_a_high_quantile_of_the_most_specific_history() -> None:
    learned = Learned()
    assert learned.estimate("cms-ml", "train-1", 4) is None
    for i, seconds in enumerate([600, 700, 800, 900, 5000]):
        learned.observe("cms-ml", f"train-{i}", 4, seconds)
    found = learned.estimate("cms-ml", "train-9", 4)
    assert found is not None
    estimate, source = found
    # p80 of five runs: the fourth longest, not the mean (1,600 s) nor the longest.
    assert estimate == timedelta(seconds=900)
    assert source == "learned: p80 of the last 5 runs of cms-ml/train/4"
    # Another GPU count: the job's runs of any size answer before the namespace's.
    assert learned.estimate("cms-ml", "train-9", 8) == (
        timedelta(seconds=900),
        "learned: p80 of the last 5 runs of cms-ml/train",
    )
    assert learned.estimate("atlas-ml", "train-9", 4) is None
    # The longest of the runs it answers from: a run like them may take as long.
    assert learned.longest("cms-ml", "train-9", 4) == timedelta(seconds=5000)
    assert learned.longest("atlas-ml", "train-9", 4) is None


def test_names_burst_cannot_stem_are_forgotten_least_recently_run_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each run named anew by hand makes keys of its own: the memory run's leader grew by a few
    hundred bytes a job until they were capped."""
    monkeypatch.setattr(runtimes, "KEYS", 30)
    learned = Learned()
    for _ in range(3):
        learned.observe("cms-ml", "train", 4, 600)  # a job that runs again and again
    for i in range(100):
        learned.observe("cms-ml", f"exp{i}", 1, 60)
        learned.observe("cms-ml", "train", 4, 600)
    assert len(learned._runs) <= 30
    assert learned.estimate("cms-ml", "train", 4) == (
        timedelta(seconds=600),
        "learned: p80 of the last 50 runs of cms-ml/train/4",
    )
    assert ("cms-ml", "exp0") not in learned._runs and ("cms-ml", "exp99") in learned._runs


def test_a_users_own_runs_answer_before_everyone_elses() -> None:
    learned = Learned()
    for i in range(3):
        learned.observe("cms-ml", f"train-{i}", 1, 600, user="alice")
    for i in range(3, 6):
        learned.observe("cms-ml", f"train-{i}", 1, 36_000)  # no label: whose is not known
    assert learned.estimate("cms-ml", "train-9", 1, user="alice") == (
        timedelta(seconds=600),
        "learned: p80 of the last 3 runs of cms-ml/train/user alice/1",
    )
    # bob has no runs of his own: everyone's six answer, as for a job with no label
    assert learned.estimate("cms-ml", "train-9", 1, user="bob") == learned.estimate(
        "cms-ml", "train-9", 1
    )
    assert learned.estimate("cms-ml", "train-9", 1) == (
        timedelta(seconds=36_000),
        "learned: p80 of the last 6 runs of cms-ml/train/1",
    )


def test_a_learned_estimate_longer_than_the_deadline_allows_is_capped_there() -> None:
    """Its owner asked for a deadline a run as long as those like it could not meet: the deadline
    says more of this run. Philly's job 75923 (19 minutes, 73 to its deadline) was learned at 18
    hours, kept on-prem as lost, and missed."""
    learned = Learned()
    for i in range(3):
        learned.observe("cms-ml", f"train-{i}", 8, 18 * 3600)
    runs = "learned: p80 of the last 3 runs of cms-ml/train/8"
    assert learned.estimate("cms-ml", "train-9", 8, allowed=timedelta(minutes=73)) == (
        timedelta(minutes=73),
        f"{runs}, at most the 1h13m to its deadline",
    )
    # A deadline that leaves the run time, none, or one already past at creation: as learned.
    for allowed in (timedelta(hours=20), None, timedelta(0), timedelta(minutes=-5)):
        assert learned.estimate("cms-ml", "train-9", 8, allowed=allowed) == (
            timedelta(hours=18),
            runs,
        )
