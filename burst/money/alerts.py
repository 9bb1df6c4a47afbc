"""Budget alerts, after each pass's metering: the thresholds a budget's use (posted spend plus what
its reservations hold) crossed since the last look, each logged and counted once, and delivered
to the people they concern: a Warning Event on each workload of the budget's scope that is
bursting now."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from burst.amounts import Money
from burst.metrics import BUDGET_ALERTS
from burst.money.ledger import BudgetLimit, used
from burst.store.tables import Workload

ACTIVE = ("planned", "dispatched", "running")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alert:
    budget: str
    threshold: int  # percent
    used: Money
    amount: Money
    hard: bool

    @property
    def message(self) -> str:
        kind = "hard" if self.hard else "soft"
        return (
            f"{kind} budget {self.budget}: {self.threshold}% reached ({self.used} of {self.amount})"
        )


def budget_alerts(
    session: Session,
    budgets: Iterable[tuple[BudgetLimit, Sequence[int]]],
    now: datetime,
    usd_rates: Mapping[str, Decimal],
    last_seen: dict[str, int],
) -> list[Alert]:
    """Thresholds crossed since the last look (`last_seen`: budget -> used micros, updated here).

    The caller delivers them: a log line and a metric here, an Event on the budget's running
    workloads in the service.
    """
    alerts = []
    for budget, thresholds in budgets:
        now_used = used(session, budget, now, usd_rates)
        before = last_seen.get(budget.name, 0)
        for threshold in crossed(now_used.micros, budget.amount.micros, thresholds, before):
            alert = Alert(budget.name, threshold, now_used, budget.amount, budget.hard)
            log.warning(alert.message)
            BUDGET_ALERTS.labels(budget=budget.name, threshold=str(threshold)).inc()
            alerts.append(alert)
        last_seen[budget.name] = now_used.micros
    return alerts


def crossed(
    used_micros: int, amount_micros: int, thresholds: Iterable[int], before_micros: int
) -> list[int]:
    """Alert thresholds (percent) that `used` has crossed since `before` (pure)."""
    return [
        t
        for t in sorted(thresholds)
        if before_micros * 100 < t * amount_micros <= used_micros * 100
    ]


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
