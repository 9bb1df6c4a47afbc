"""One reconcile pass: observe the clusters and clouds, decide, act, and record it all.

observe (the on-prem Observer, pools and dispatches from the database, budgets from the ledger) ->
`decide.plan` -> act through provision (pools), replicate (dispatch once a pool is ready), sync
(mirror, finish, clean up), and meter (a pool's charges are posted when it is deleted). Each step
records its intent in the database before it calls out, so a pass killed at any line is finished
by the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from burst import decide, failpoints, ledger
from burst.catalog import Catalog, UnavailableOffers
from burst.clock import Clock
from burst.config import Config
from burst.meter import PoolHistory, Use, meter
from burst.metrics import DECISION_SECONDS
from burst.model import (
    BudgetView,
    Cloud,
    CreatePool,
    DeletePool,
    Dispatch,
    Plan,
    ResizePool,
    Snapshot,
)
from burst.money import Money
from burst.provider import ProviderError
from burst.provision import Provisioner
from burst.replicate import KubeObjects, Replicator
from burst.sync import Syncer
from burst.tables import Dispatch as DispatchRow
from burst.tables import Pool, PoolEvent, Workload
from burst.watch import Observer

log = logging.getLogger(__name__)
ACTIVE = ("planned", "dispatched")
CAPACITY_REPLANS = 3  # plans tried in one pass when clouds refuse pools for capacity


@dataclass
class PassReport:
    plan: Plan
    dispatched: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        *,
        config: Config,
        catalog: Catalog,
        clock: Clock,
        sessions: sessionmaker[Session],
        observer: Observer,
        local: KubeObjects,
        remotes: Mapping[str, KubeObjects],
        provisioner: Provisioner,
        replicator: Replicator,
        syncer: Syncer,
        budgets: Sequence[ledger.BudgetLimit] = (),
    ) -> None:
        assert config.service is not None
        self.config, self.service = config, config.service.spec
        self.targets = {t.name: t for t in self.service.targets}
        self.catalog, self.clock, self.sessions = catalog, clock, sessions
        self.observer, self.local, self.remotes = observer, local, remotes
        self.provisioner, self.replicator, self.syncer = provisioner, replicator, syncer
        self.budgets = list(budgets)
        self.unavailable: UnavailableOffers = provisioner.unavailable
        self._idle_since: dict[str, datetime] = {}
        self._orphans_seen: dict[str, datetime] = {}

    # -- the pass --

    def run_once(self) -> PassReport:
        with self.sessions() as s:
            self.provisioner.refresh(s)
            for pool in self.provisioner.deleting(s):  # a pass died while deleting it
                self.delete_pool(s, pool.name, pool.state_reason or "deleting")
            report = PassReport(Plan())
            self._dispatch_ready(s, report)
            self._sync(s, report)
            report.plan = self._plan(s)
            refused = self._act(s, report.plan)
            # A pool refused for capacity backs its offer off at once; plan again in this pass,
            # so its workloads go to the next-best offer now rather than a pass later.
            for _ in range(CAPACITY_REPLANS):
                if not refused:
                    break
                self._dispatch_ready(s, report)  # their dispatches go back to the queue
                report.plan = self._plan(s)
                refused = self._act(s, report.plan)
            return report

    def _dispatch_ready(self, s: Session, report: PassReport) -> None:
        for d in s.scalars(select(DispatchRow).where(DispatchRow.state == "planned")).all():
            pool = s.get(Pool, d.pool_id)
            w = s.get(Workload, d.workload_id)
            assert w is not None and pool is not None
            if (
                pool.state == "failed"
            ):  # the pool never came: back to the queue, the next plan decides
                d.state, w.state = "cancelled", "pending"
                w.state_reason = f"pool {pool.name} failed: {pool.state_reason}"
                s.commit()
                continue
            if pool.state != "ready":
                continue
            obj = self.local.read(w.kind, w.namespace, w.name)
            if obj is None:
                d.state, w.state = "cancelled", "cancelled"
                s.commit()
                continue
            policy = self.config.policies[w.policy or ""]
            target = self.targets[d.target]
            result = self.replicator.dispatch(
                obj,
                self.remotes[d.target],
                target=d.target,
                pool=pool.name,
                remote_namespace=target.remote_namespace.format(namespace=w.namespace),
                rules=policy.spec.replication,
            )
            failpoints.hit("dispatch-not-recorded")
            d.remote_namespace, d.remote_name, d.updated_at = (
                result.remote_namespace,
                result.remote_name,
                self.clock.now(),
            )
            if result.outcome == "dispatched":
                d.state, w.state = "dispatched", "dispatched"
                report.dispatched.append(f"{w.namespace}/{w.name}")
            elif result.outcome == "started-on-prem":
                d.state, w.state = "cancelled", "cancelled"
                w.state_reason = "started on-prem before its dispatch"
            else:
                d.state, w.state = "cancelled", "cancelled"
                w.state_reason = "refused: " + "; ".join(result.reasons)
                report.refused.append(f"{w.namespace}/{w.name}")
            s.commit()

    def _sync(self, s: Session, report: PassReport) -> None:
        for d in s.scalars(select(DispatchRow).where(DispatchRow.state == "dispatched")).all():
            w = s.get(Workload, d.workload_id)
            assert w is not None
            obj = self.local.read(w.kind, w.namespace, w.name)
            if obj is None:  # the user deleted it: the remote copy goes too
                self.remotes[d.target].delete(w.kind, d.remote_namespace, d.remote_name)
                d.state, w.state = "done", "cancelled"
                s.commit()
                continue
            micros = ledger.workload_cost(s, w.uid).get("USD")
            update = self.syncer.sync(
                obj,
                self.remotes[d.target],
                d.remote_namespace,
                d.remote_name,
                f"{d.target}/{s.get(Pool, d.pool_id).name}",  # type: ignore[union-attr]
                Money(micros, "USD") if micros else None,
            )
            if update.finished is not None:
                d.state, w.state, d.updated_at = "done", update.finished, self.clock.now()
                report.finished.append(f"{w.namespace}/{w.name}")
                s.commit()

    def _budget_views(self, s: Session) -> tuple[BudgetView, ...]:
        rates = self.service.usd_exchange_rates
        now = self.clock.now()
        return tuple(
            BudgetView(b.name, b.scope, b.value, b.amount - ledger.used(s, b, now, rates), b.hard)
            for b in self.budgets
        )

    def _plan(self, s: Session) -> Plan:
        known = {w.uid: w for w in s.scalars(select(Workload))}
        pending = []
        for w in self.observer.workloads():
            row = known.get(w.uid)
            if row is None or row.state == "pending":
                pending.append(w)
            elif row.state == "planned":
                pending.append(replace(w, phase="planned", planned_pool=None))
        used: dict[str, list[int]] = {}
        active_pools = set()
        for d in s.scalars(select(DispatchRow).where(DispatchRow.state.in_(ACTIVE))):
            held = s.get(Workload, d.workload_id)
            pool = s.get(Pool, d.pool_id)
            if held is not None and pool is not None:
                used.setdefault(pool.name, []).extend([held.gpus_per_pod] * held.pods)
                active_pools.add(pool.name)
        now = self.clock.now()
        for pool in s.scalars(select(Pool).where(Pool.state == "ready")):
            if pool.name in active_pools:
                self._idle_since.pop(pool.name, None)
            else:
                self._idle_since.setdefault(pool.name, now)
        snapshot = Snapshot(
            taken_at=now,
            workloads=tuple(pending),
            onprem=self.observer.onprem(),
            pools=tuple(self.provisioner.views(s, used, self._idle_since)),
            budgets=self._budget_views(s),
            unavailable=tuple(self.unavailable.current()),
        )
        with DECISION_SECONDS.time():
            return decide.plan(snapshot, self.catalog, self.config, now)

    def _act(self, s: Session, plan: Plan) -> list[str]:
        """Carry the plan out; returns the pools the cloud refused at once."""
        by_uid = {w.uid: w for w in self.observer.workloads()}
        refused = []
        for action in plan.actions:
            if isinstance(action, CreatePool):
                if self.provisioner.create(s, action).state == "failed":
                    refused.append(action.pool)
            elif isinstance(action, ResizePool):
                self.provisioner.resize(s, action.pool, action.nodes)
            elif isinstance(action, Dispatch):
                w = by_uid.get(action.workload)
                pool = s.scalar(select(Pool).where(Pool.name == action.pool))
                if w is None or pool is None:
                    continue
                now = self.clock.now()
                row = s.scalar(select(Workload).where(Workload.uid == w.uid))
                if row is None:
                    row = Workload(
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
                row.state, row.state_reason, row.updated_at = "planned", action.reason, now
                s.flush()
                attempt = 1 + len(
                    list(s.scalars(select(DispatchRow).where(DispatchRow.workload_id == row.id)))
                )
                s.add(
                    DispatchRow(
                        workload_id=row.id,
                        pool_id=pool.id,
                        attempt=attempt,
                        target=action.target,
                        remote_namespace="",
                        remote_name=f"planned-{row.uid}-{attempt}",
                        state="planned",
                        epoch=self.provisioner.epoch,
                        created_at=now,
                        updated_at=now,
                    )
                )
            elif isinstance(action, DeletePool):
                self.delete_pool(s, action.pool, action.reason)
        # Planned dispatches are intents for the next pass, which replicates them: one commit for
        # all of them (a pass that dies before it loses only plans, and the next pass plans again).
        s.commit()
        return refused

    def _policy_name(self, namespace: str, labels: Mapping[str, str]) -> str:
        from burst.config import selector_matches

        return next(
            name
            for name, p in sorted(self.config.policies.items())
            if selector_matches(p.spec.selector, namespace, labels)
        )

    def refresh_prices(self) -> list[str]:
        """Ask every provider that has live prices for them; the catalog keeps the last good ones."""
        problems: list[str] = []
        for target, provider in sorted(self.provisioner.providers.items()):
            refresh = getattr(provider, "refresh_prices", None)
            if refresh is not None:
                problems += [f"{target}: {p}" for p in refresh()]
        return problems

    # -- orphans, both ways --

    def collect_orphans(self, grace: timedelta = timedelta(minutes=10)) -> list[str]:
        """Pools in a cloud with our owner tag but no row (a create whose row was lost) are deleted
        once seen for `grace`; rows whose cloud pool is gone are closed, metered, and their
        workloads requeued. Returns what was done, in words."""
        done: list[str] = []
        now = self.clock.now()
        with self.sessions() as s:
            rows = {p.name: p for p in s.scalars(select(Pool))}
            for target, provider in sorted(self.provisioner.providers.items()):
                try:
                    in_cloud = {
                        p.name: p for p in provider.list_pools(self.service.installation_id)
                    }
                except ProviderError as exc:
                    log.warning("orphan scan of %s: %s", target, exc.message)
                    continue
                for name in sorted(in_cloud):
                    row = rows.get(name)
                    if row is not None and row.state not in ("deleted", "failed"):
                        self._orphans_seen.pop(name, None)
                        continue
                    first = self._orphans_seen.setdefault(name, now)
                    if now - first >= grace:
                        provider.delete_pool(name)
                        self._orphans_seen.pop(name, None)
                        done.append(f"deleted orphan pool {target}/{name}")
                for row in [
                    r
                    for r in rows.values()
                    if r.target == target and r.state in ("ready", "creating")
                ]:
                    if row.name not in in_cloud:
                        done.append(f"pool {row.name} vanished from {target}")
                        self._lost_pool(s, row)
        return done

    def _lost_pool(self, s: Session, row: Pool) -> None:
        row.deleted_at = self.clock.now()
        row.state_reason = "gone from the cloud"
        self.meter_pool(s, row)
        self.provisioner.mark_deleted(s, row)
        for d in s.scalars(
            select(DispatchRow).where(DispatchRow.pool_id == row.id, DispatchRow.state.in_(ACTIVE))
        ).all():
            w = s.get(Workload, d.workload_id)
            if w is None:
                continue
            obj = self.local.read(w.kind, w.namespace, w.name)
            if obj is not None:
                self.syncer.requeue(obj, d.target)
            d.state, w.state, w.state_reason = "cancelled", "requeued", f"pool {row.name} was lost"
        s.commit()

    # -- teardown and metering --

    def delete_pool(self, s: Session, name: str, reason: str) -> None:
        """Delete in the cloud, post the pool's charges, then mark it deleted: each step is safe to
        repeat, so a pass killed between any two leaves a `deleting` row the next pass finishes."""
        row = self.provisioner.delete(s, name, reason)
        if row is not None:
            self._idle_since.pop(name, None)
            self.meter_pool(s, row)
            failpoints.hit("pool-metered")
            self.provisioner.mark_deleted(s, row)

    def meter_pool(self, s: Session, row: Pool) -> int:
        events = list(
            s.scalars(select(PoolEvent).where(PoolEvent.pool_id == row.id).order_by(PoolEvent.at))
        )
        changes = tuple((e.at, e.nodes) for e in events if e.to_state in ("creating", "ready"))
        uses = []
        for d in s.scalars(
            select(DispatchRow).where(DispatchRow.pool_id == row.id, DispatchRow.state == "done")
        ):
            w = s.get(Workload, d.workload_id)
            if w is not None:
                uses.append(Use(w.uid, w.team, w.gpus_per_pod * w.pods, d.created_at, d.updated_at))
        policy = self.config.policies.get(row.policy)
        team = policy.spec.team if policy and policy.spec.team else "burst-platform"
        history = PoolHistory(
            pool=row.name,
            cloud=cast(Cloud, row.provider),  # the cloud whose prices and billing rule apply
            team=team,
            policy=row.policy,
            unit_price_micros=row.unit_price_micros,
            currency=row.currency,
            price_source=row.price_source,
            gpus_per_node=row.gpus_per_node,
            created=row.created_at,
            ready=row.ready_at,
            node_changes=changes,
            deleted=row.deleted_at,
        )
        charges = meter(history, uses, (row.deleted_at or self.clock.now()) + timedelta(hours=2))
        namespaces = {w.uid: w.namespace for w in s.scalars(select(Workload))}
        target = self.targets[row.target]
        context = ledger.ChargeContext(row.id, row.policy, target.cloud, row.region, namespaces, {})
        posted = ledger.post(s, charges, context, self.clock)
        s.commit()
        for use in uses:  # the jobs show what they cost
            w = s.scalar(select(Workload).where(Workload.uid == use.workload))
            micros = ledger.workload_cost(s, use.workload).get("USD")
            if w is not None and micros is not None:
                self.local.patch(
                    w.kind,
                    w.namespace,
                    w.name,
                    {
                        "metadata": {
                            "annotations": {
                                f"{self.service.label_prefix}cost": str(Money(micros, "USD"))
                            }
                        }
                    },
                )
        return posted
