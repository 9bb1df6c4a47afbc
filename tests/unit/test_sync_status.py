"""sync.status_update: what the user's workload shows about its remote copy (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from burst.amounts import Money
from burst.kube.sync import failed_pods, remote_phase, restarts_in_place, status_update

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LOCAL = {"kind": "Job", "metadata": {"name": "j", "annotations": {}}}


def remote(*conditions: str, active: int = 0, **status: Any) -> dict[str, Any]:
    return {
        "status": {
            "active": active,
            **status,
            "conditions": [{"type": c, "status": "True"} for c in conditions],
        }
    }


def test_phases() -> None:
    assert remote_phase(None) == "missing"
    assert remote_phase(remote()) == "pending"
    assert remote_phase(remote(active=1)) == "running"
    assert remote_phase(remote("SuccessCriteriaMet", "Complete")) == "succeeded"
    assert remote_phase(remote("Failed")) == "failed"
    assert (
        remote_phase({"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}})
        == "succeeded"
    )


def test_running_shows_placement_and_cost_and_says_so_once() -> None:
    update = status_update(LOCAL, remote(active=2), "aws-euc1/pool-1", Money.of("1.25", "USD"), NOW)
    assert update.annotations == {
        "burst.dev/placement": "aws-euc1/pool-1",
        "burst.dev/remote-phase": "running",
        "burst.dev/cost": "1.25 USD",
    }
    assert (
        update.event == ("Normal", "BurstProgress", "running on aws-euc1/pool-1")
        and update.finished is None
    )
    seen = {**LOCAL, "metadata": {"annotations": {"burst.dev/remote-phase": "running"}}}
    assert status_update(seen, remote(active=2), "aws-euc1/pool-1", None, NOW).event is None


def types(status: dict[str, Any]) -> list[str]:
    return [c["type"] for c in status["conditions"] if c["status"] == "True"]


def test_success_carries_the_remote_status_back_as_a_132_server_accepts_it() -> None:
    """The remote status whole; a remote cluster older than 1.31 sets no SuccessCriteriaMet, which
    a 1.32+ local server requires beside Complete, with a startTime and a completionTime."""
    update = status_update(LOCAL, remote("Complete", succeeded=3), "gcp/p", None, NOW)
    assert update.finished == "succeeded"
    assert update.local_status["succeeded"] == 3
    assert types(update.local_status) == ["Complete", "SuccessCriteriaMet"]
    assert update.local_status["startTime"] <= update.local_status["completionTime"]
    assert update.event is not None and update.event[0] == "Normal"
    started = remote(
        "SuccessCriteriaMet",
        "Complete",
        succeeded=1,
        startTime="2026-11-30T10:00:00Z",
        completionTime="2026-11-30T11:00:00Z",
    )
    whole = status_update(LOCAL, started, "gcp/p", None, NOW).local_status
    assert (whole["startTime"], whole["completionTime"]) == (
        "2026-11-30T10:00:00Z",
        "2026-11-30T11:00:00Z",
    )
    assert types(whole) == ["SuccessCriteriaMet", "Complete"]


def test_failure_is_a_warning_and_a_failed_condition() -> None:
    update = status_update(
        {"kind": "PyTorchJob", "metadata": {}}, remote("Failed"), "azure/p", None, NOW
    )
    assert update.finished == "failed"
    assert types(update.local_status) == ["Failed"]
    assert update.event is not None and update.event[0] == "Warning"
    job = status_update(LOCAL, remote("Failed", failed=2), "azure/p", None, NOW).local_status
    assert types(job) == ["Failed", "FailureTarget"] and "completionTime" not in job


def test_an_outcome_recorded_before_the_remote_copy_went_finishes_the_workload() -> None:
    # The remote copy was deleted after its outcome was written here, but the database never
    # heard: the next pass finishes from what the workload shows, without saying it again.
    for kind, phase in (("Complete", "succeeded"), ("Failed", "failed")):
        done = status_update(LOCAL, remote(kind), "gcp/p", None, NOW)
        recorded = {
            **LOCAL,
            "metadata": {"annotations": done.annotations},
            "status": done.local_status,
        }
        again = status_update(recorded, None, "gcp/p", None, NOW)
        assert again.finished == phase and again.event is None and not again.local_status
    # A copy that is missing while nothing was recorded is not an outcome.
    assert status_update(LOCAL, None, "gcp/p", None, NOW).finished is None


def test_a_job_copy_counts_its_failed_pods_listed_or_not() -> None:
    """The Job controller lists a failed pod in uncountedTerminatedPods first and counts it in
    status.failed on a later write; both are counted. Another kind counts none. Whether a failing
    container restarts in place is the template's restartPolicy OnFailure."""
    ignore = {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    job = {
        "kind": "Job",
        "spec": {
            "podFailurePolicy": {"rules": [ignore]},
            "template": {"spec": {"restartPolicy": "Never"}},
        },
        "status": {"failed": 2},
    }
    assert failed_pods(job) == 2 and not restarts_in_place(job)
    listed = {**job, "status": {"failed": 2, "uncountedTerminatedPods": {"failed": ["uid-3"]}}}
    assert failed_pods(listed) == 3
    assert failed_pods({**job, "kind": "PyTorchJob"}) == 0 and failed_pods(None) == 0
    on_failure = {**job, "spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}
    assert restarts_in_place(on_failure) and not restarts_in_place(
        {**on_failure, "kind": "PyTorchJob"}
    )
