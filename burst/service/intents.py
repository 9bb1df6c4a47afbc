"""The plan's dispatches recorded as intents: a step of the reconcile pass (loop.py) between the
decision and replication. Each dispatch row is written with its estimate reserved against every
budget over its workload, in the pass's transaction; the next pass replicates it once its pool is
ready (remote.py). A budget that refuses the reservation leaves the workload pending, with the
reason on its row. A dispatch the plan moves off a pool that launches late (decide/replan.py) is
cancelled first, while it is still only planned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from burst.amounts import Money
from burst.clock import Clock
from burst.config import Config, selector_matches
from burst.decide import expected_runtime
from burst.model import DEFAULT_RUNTIME_SOURCE, Action, CancelDispatch, Dispatch
from burst.model import Workload as WorkloadView
from burst.money import ledger
from burst.money.guard import first_hold, horizon
from burst.store.tables import Dispatch as DispatchRow
from burst.store.tables import Pool, Workload

log = logging.getLogger(__name__)


class Intents:
    def __init__(
        self,
        *,
        config: Config,
        clock: Clock,
        budgets: Sequence[ledger.BudgetLimit],
        epoch: Callable[[], int],
    ) -> None:
        assert config.service is not None
        self.config, self.service, self.clock = config, config.service.spec, clock
        self.budgets, self.epoch = list(budgets), epoch
        self.ahead = horizon(config)

    def record(
        self, s: Session, actions: Sequence[Dispatch], workloads: Iterable[WorkloadView]
    ) -> None:
        """The plan's dispatches, with their pools, workload rows and earlier attempts read in
        three queries for all of them, and the new workload rows written in one flush (ten
        thousand one at a time took most of a pass)."""
        by_uid = {w.uid: w for w in workloads}
        wanted = [(a, by_uid[a.workload]) for a in actions if a.workload in by_uid]
        if not wanted:
            return
        names = {a.pool for a, _ in wanted}
        uids = [w.uid for _, w in wanted]
        pools = {p.name: p for p in s.scalars(select(Pool).where(Pool.name.in_(names)))}
        rows = {r.uid: r for r in s.scalars(select(Workload).where(Workload.uid.in_(uids)))}
        attempts: dict[int, int] = {
            workload: count
            for workload, count in s.execute(
                select(DispatchRow.workload_id, func.count())
                .where(DispatchRow.workload_id.in_([r.id for r in rows.values()]))
                .group_by(DispatchRow.workload_id)
            )
        }
        now = self.clock.now()
        wanted = [(a, w) for a, w in wanted if a.pool in pools]
        for _, w in wanted:
            row = rows.get(w.uid)
            if row is None:
                row = rows[w.uid] = Workload(
                    uid=w.uid,
                    kind=w.kind,
                    namespace=w.namespace,
                    name=w.name,
                    team=w.team,
                    gpus_per_pod=w.gpus_per_pod,
                    pods=w.pods,
                    accelerator=w.accelerator,
                    created_at=w.created,
                    updated_at=now,
                )
                s.add(row)
            row.policy = self._policy_name(w.namespace, w.labels)
            # What this dispatch was planned with: declared, learned or the policy's default. The
            # pass reads its expected end from it (loop.py), and a pool whose work has no known
            # end is weighed without it (reuse, a pool past its lifetime at the pool cap).
            runtime = expected_runtime(w, self.config.policies[row.policy])
            row.expected_runtime_s = int(runtime.total_seconds())
            row.runtime_source = (
                (w.runtime_source or None)
                if w.expected_runtime is not None
                else DEFAULT_RUNTIME_SOURCE
            )
        s.flush()  # the new rows' ids, in a batch
        for action, w in wanted:
            self._one(s, action, w, pools[action.pool], rows[w.uid], attempts)

    def _one(
        self,
        s: Session,
        action: Dispatch,
        w: WorkloadView,
        pool: Pool,
        row: Workload,
        attempts: Mapping[int, int],
    ) -> None:
        """The dispatch intent, for the next pass to replicate once its pool is ready, with its
        estimate reserved against every budget over it in the same transaction."""
        now = self.clock.now()
        policy = row.policy or ""
        covering = [b for b in self.budgets if b.covers(w.team, policy, w.namespace)]
        try:
            if covering:  # a refusal takes back this dispatch's reservations only
                rates = self.service.usd_rates(now)
                held = action.estimated_cost
                if any(b.hard for b in covering):  # what the spend guard's first look asks
                    estimate = ledger.convert({held.currency: held.micros}, pool.currency, rates)
                    micros = first_hold(
                        estimate.micros, w.gpus_per_pod * w.pods, pool.gpus_per_node,
                        pool.unit_price_micros, self.ahead,
                    )  # fmt: skip
                    held = Money(micros, pool.currency)
                with s.begin_nested():
                    for budget in covering:
                        ledger.reserve(
                            s,
                            budget,
                            held,
                            self.clock,
                            rates,
                            pool_id=pool.id,
                            workload_id=row.id,
                        )
        except ledger.BudgetExceeded as exc:
            log.warning(
                "not dispatching %s/%s: %s",
                w.namespace,
                w.name,
                exc,
                extra={"workload": f"{w.namespace}/{w.name}", "reason": str(exc)},
            )
            row.state_reason = str(exc)
            return
        row.state, row.state_reason, row.updated_at = "planned", action.reason, now
        attempt = 1 + attempts.get(row.id, 0)
        s.add(
            DispatchRow(
                workload_id=row.id,
                pool_id=pool.id,
                attempt=attempt,
                target=action.target,
                remote_namespace="",
                remote_name=f"planned-{row.uid}-{attempt}",
                state="planned",
                epoch=self.epoch(),
                created_at=now,
                updated_at=now,
            )
        )

    def cancel_moved(self, s: Session, actions: Sequence[Action]) -> set[str]:
        """Cancel the planned dispatches a plan moves to other pools; returns the workloads whose
        dispatch was planned there no longer, and which stay where they are."""
        return {
            a.workload for a in actions if isinstance(a, CancelDispatch) and not self.cancel(s, a)
        }

    def cancel(self, s: Session, action: CancelDispatch) -> bool:
        """A planned dispatch the plan moves to another pool (decide/replan.py): cancelled while
        it is still only planned, with no copy made anywhere (a pass replicates planned ones once
        their pool is ready), and its workload pending for the plan's new dispatch. False when it
        is planned there no longer: the plan's new dispatch of it must not be made."""
        found = s.execute(
            select(DispatchRow, Workload)
            .join(Workload, Workload.id == DispatchRow.workload_id)
            .join(Pool, Pool.id == DispatchRow.pool_id)
            .where(
                Workload.uid == action.workload,
                Pool.name == action.pool,
                DispatchRow.state == "planned",
            )
        ).first()
        if found is None:
            return False
        d, w = found
        now = self.clock.now()
        d.state, d.state_reason, d.updated_at = "cancelled", action.reason, now
        w.state, w.state_reason, w.updated_at = "pending", action.reason, now
        log.info(
            "moving %s/%s off pool %s: %s",
            w.namespace,
            w.name,
            action.pool,
            action.reason,
            extra={"workload": f"{w.namespace}/{w.name}", "reason": action.reason},
        )
        return True

    def _policy_name(self, namespace: str, labels: Mapping[str, str]) -> str:
        return next(
            name
            for name, p in sorted(self.config.policies.items())
            if selector_matches(p.spec.selector, namespace, labels)
        )
