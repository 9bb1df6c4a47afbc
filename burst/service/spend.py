"""The pass's spend guard, after the running pools are metered and the copies followed: every copy
running under a hard budget has what it will cost until burst can next act reserved, and one whose
budget refuses is stopped and requeued on-prem (money/guard.py says why and how much).

"Until burst can next act" is `graces.budgetHorizon` (at least two reconcile intervals and a
leader's lease): a slow pass, a new leader taking over or a database outage within it still finds
the run covered. The long soak passed its budget by 1 % with only the intervals and the lease.
Statements per pass: one for the running copies, one per hard budget for what its reservations
hold, one for the runs' last posted hours; a reservation or a stop adds a few for that run alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from burst.amounts import Money
from burst.clock import Clock
from burst.config import Config
from burst.money import guard, ledger
from burst.service.remote import Outcomes, RemoteSteps
from burst.store.tables import Dispatch as DispatchRow
from burst.store.tables import LedgerEntry, Pool, Workload

log = logging.getLogger(__name__)


class SpendGuard:
    def __init__(
        self,
        *,
        config: Config,
        clock: Clock,
        budgets: Sequence[ledger.BudgetLimit],
        remote: RemoteSteps,
    ) -> None:
        assert config.service is not None
        self.service = config.service.spec
        self.clock, self.remote = clock, remote
        self.hard = [b for b in budgets if b.hard]
        self.ahead = guard.horizon(config)

    def check(self, s: Session, out: Outcomes) -> None:
        if not self.hard:
            return
        running = [
            (d, w, pool)
            for d, w, pool in s.execute(
                select(DispatchRow, Workload, Pool)
                .join(Workload, Workload.id == DispatchRow.workload_id)
                .join(Pool, Pool.id == DispatchRow.pool_id)
                .where(DispatchRow.state == "dispatched", DispatchRow.remote_namespace != "")
                .order_by(DispatchRow.id)
            ).all()
            if any(b.covers(w.team, w.policy or "", w.namespace) for b in self.hard)
        ]
        if not running:
            return
        now = self.clock.now()
        posted_to = self._posted_to(s, [w.uid for _, w, _ in running])
        rates = self.service.usd_rates(now)
        stopped: set[int] = set()
        for budget in self.hard:
            start, end = ledger.period_bounds(budget.period, now, budget.zone)
            held = ledger.held_by_run(s, budget.name, start, end)
            for d, w, pool in running:
                if d.id in stopped or not budget.covers(w.team, w.policy or "", w.namespace):
                    continue
                run = guard.Run(
                    budget=budget.name,
                    workload_id=w.id,
                    pool_id=pool.id,
                    # Charged from its dispatch once its pool's nodes were up, from its last
                    # posted hour on, within the budget's period.
                    since=max(
                        d.created_at,
                        pool.ready_at or d.created_at,
                        start,
                        posted_to.get((w.uid, pool.id), start),
                    ),
                    gpus=w.gpus_per_pod * w.pods,
                    gpus_per_node=pool.gpus_per_node,
                    node_micros_per_hour=pool.unit_price_micros,
                    currency=pool.currency,
                    held=held.get((w.id, pool.id, pool.currency), 0),
                )
                more = guard.top_up(run, now, self.ahead)
                if more and not self._reserve(s, budget, run, more, rates):
                    why = (
                        f"stopped on {d.target}: hard budget {budget.name} cannot cover its run "
                        f"beyond {_at(now + self.ahead)} ({Money(more, run.currency)} more)"
                    )
                    log.warning(
                        "budget stop of %s/%s: %s",
                        w.namespace,
                        w.name,
                        why,
                        extra={"workload": f"{w.namespace}/{w.name}", "reason": why},
                    )
                    self.remote.stop(s, d, w, why, out)
                    stopped.add(d.id)
        s.commit()

    def _reserve(
        self,
        s: Session,
        budget: ledger.BudgetLimit,
        run: guard.Run,
        micros: int,
        rates: Mapping[str, Decimal],
    ) -> bool:
        try:
            with s.begin_nested():
                ledger.reserve(
                    s,
                    budget,
                    Money(micros, run.currency),
                    self.clock,
                    rates,
                    pool_id=run.pool_id,
                    workload_id=run.workload_id,
                )
        except ledger.BudgetExceeded:
            return False
        return True

    @staticmethod
    def _posted_to(s: Session, uids: list[str]) -> dict[tuple[str, int], datetime]:
        """The end of each run's last posted hour on each pool."""
        out: dict[tuple[str, int], datetime] = {}
        for chunk in range(0, len(uids), 1000):
            for uid, pool_id, last in s.execute(
                select(LedgerEntry.workload_uid, LedgerEntry.pool_id, func.max(LedgerEntry.period_end))
                .where(LedgerEntry.workload_uid.in_(uids[chunk : chunk + 1000]))
                .group_by(LedgerEntry.workload_uid, LedgerEntry.pool_id)
            ):  # fmt: skip
                if uid is not None and pool_id is not None:
                    out[(uid, pool_id)] = last
        return out


def _at(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")
