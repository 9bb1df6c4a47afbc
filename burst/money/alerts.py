"""Deliver budget alerts to the people they concern: a Warning Event on each workload of the
budget's scope that is bursting now (ledger.budget_alerts has already logged and counted them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from burst.money.ledger import Alert, BudgetLimit
from burst.store.tables import Workload

ACTIVE = ("planned", "dispatched", "running")


class Recorder(Protocol):
    """Where alerts go: kube/events.py's EventRecorder writes them as Events on the job."""

    def record(
        self, obj: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str
    ) -> bool: ...


def deliver(
    session: Session,
    alerts: Iterable[Alert],
    budgets: Mapping[str, BudgetLimit],
    events: Recorder,
) -> int:
    """Record each alert on the budget's active workloads; returns how many Events were written."""
    written = 0
    for alert in alerts:
        budget = budgets[alert.budget]
        column = {
            "team": Workload.team,
            "policy": Workload.policy,
            "namespace": Workload.namespace,
        }[budget.scope]
        rows = session.scalars(
            select(Workload).where(column == budget.value, Workload.state.in_(ACTIVE))
        )
        for w in rows:
            api_version = "kubeflow.org/v1" if w.kind == "PyTorchJob" else "batch/v1"
            obj = {
                "kind": w.kind,
                "apiVersion": api_version,
                "metadata": {"name": w.name, "namespace": w.namespace, "uid": w.uid},
            }
            written += events.record(obj, "Warning", "BudgetThreshold", alert.message)
    return written
