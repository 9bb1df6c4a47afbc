"""Budget alerts reach the jobs they concern as Warning Events."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from burst.amounts import Money
from burst.clock import SystemClock
from burst.kube.events import EventRecorder
from burst.money import alerts, ledger
from burst.store import database
from burst.store.tables import Workload


def test_alert_events_on_the_active_workloads_of_the_scope(kube: Any, tmp_path: Path) -> None:
    batch = client.BatchV1Api(kube)
    job = batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "bursting"},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
                },
            },
        },
    )
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    now = datetime(2026, 11, 30, tzinfo=UTC)
    common = {
        "kind": "Job",
        "namespace": "default",
        "gpus_per_pod": 1,
        "pods": 1,
        "created_at": now,
        "updated_at": now,
    }
    with database.sessions(engine).begin() as s:
        s.add(
            Workload(
                uid=job.metadata.uid, name="bursting", team="cms", state="dispatched", **common
            )
        )
        s.add(Workload(uid="other", name="done", team="cms", state="succeeded", **common))
        s.add(Workload(uid="third", name="elsewhere", team="atlas", state="running", **common))
    budget = ledger.BudgetLimit(
        "cms-month", "team", "cms", Money.of("100", "USD"), "month", hard=False
    )
    alert = alerts.Alert("cms-month", 80, Money.of("85", "USD"), budget.amount, hard=False)
    with database.sessions(engine)() as s:
        assert (
            alerts.deliver(s, [alert], {"cms-month": budget}, EventRecorder(kube, SystemClock()))
            == 1
        )
    (event,) = [
        e
        for e in client.CoreV1Api(kube).list_namespaced_event("default").items
        if e.reason == "BudgetThreshold"
    ]
    assert event.involved_object.uid == job.metadata.uid and event.type == "Warning"
    assert event.message == "soft budget cms-month: 80% reached (85.00 USD of 100.00 USD)"
    engine.dispose()
