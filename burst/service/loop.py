"""One reconcile pass: observe the clusters and clouds, decide, act, and record it all.

observe (the on-prem Observer, pools and dispatches from the database, budgets from the ledger) ->
`decide.plan` -> act through provision (pools), replicate (dispatch once a pool is ready), sync
(mirror, finish, clean up), and meter (a pool's charges are posted when it is deleted). Each step
records its intent in the database before it calls out, so a pass killed at any line is finished
by the next one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from burst import decide
from burst.clock import Clock
from burst.cloud.catalog import Catalog, UnavailableOffers
from burst.cloud.provision import Provisioner, pool_views, take_failed
from burst.config import Config
from burst.decide.existing import SENT_WINDOW
from burst.kube.copies import RemoteCopies
from burst.kube.events import EventRecorder
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects, Replicator
from burst.kube.sync import RemoteHealth, Syncer
from burst.metrics import DECISION_SECONDS, PASS_SECONDS, PASS_STATEMENTS, QUEUE
from burst.model import (
    Action,
    BudgetView,
    CreatePool,
    DeletePool,
    Dispatch,
    Plan,
    ResizePool,
    Snapshot,
)
from burst.money import alerts, ledger
from burst.runtimes import run_end
from burst.service import logs
from burst.service.intents import Intents
from burst.service.remote import CLUSTER_ERRORS, Outcomes, RemoteSteps
from burst.service.spend import SpendGuard
from burst.service.teardown import LIVE_STATES, Teardown
from burst.store import database
from burst.store.tables import Dispatch as DispatchRow
from burst.store.tables import Pool, Workload

log = logging.getLogger(__name__)
ACTIVE = ("planned", "dispatched")
CAPACITY_REPLANS = 3  # plans tried in one pass when clouds refuse pools for capacity


@dataclass
class PassReport:
    plan: Plan
    outcomes: Outcomes = field(default_factory=Outcomes)
    statements: int = 0  # SQL statements the pass sent
    seconds: float = 0.0


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
        mirrors: Mapping[str, RemoteCopies] | None = None,
    ) -> None:
        assert config.service is not None
        self.config, self.service = config, config.service.spec
        self.targets = {t.name: t for t in self.service.targets}
        self.catalog, self.clock, self.sessions = catalog, clock, sessions
        self.observer, self.local, self.remotes = observer, local, remotes
        self.provisioner, self.replicator, self.syncer = provisioner, replicator, syncer
        self.budgets = list(budgets)
        self.thresholds = [
            (
                b,
                config.budgets[b.name].spec.alert_thresholds_percent
                if b.name in config.budgets
                else [],
            )
            for b in self.budgets
        ]
        self.alerts_seen: dict[str, int] = {}  # budget -> micros used at the last look
        self.passes = 0
        self.skipped: dict[str, str] = {}  # workload uid -> the reason last logged
        self.unavailable: UnavailableOffers = provisioner.unavailable
        self.remote = RemoteSteps(
            config=config,
            clock=clock,
            local=local,
            remotes=remotes,
            replicator=replicator,
            syncer=syncer,
            cached=observer.object,
            mirrors=mirrors,
            health=RemoteHealth(clock, self.service.graces.remote_cluster),
        )
        self.intents = Intents(
            config=config, clock=clock, budgets=self.budgets, epoch=lambda: provisioner.epoch
        )
        self.guard = SpendGuard(
            config=config, clock=clock, budgets=self.budgets, remote=self.remote
        )
        self.teardown = Teardown(
            config=config,
            clock=clock,
            sessions=sessions,
            local=local,
            provisioner=provisioner,
            syncer=syncer,
        )

    # -- the pass --

    def run_once(self) -> PassReport:
        if not self.observer.synced:
            # Half a picture is worse than none: without the nodes, on-prem looks empty and
            # every pending job would burst.
            log.warning("the on-prem watch has not listed everything yet: no plan this pass")
            return PassReport(Plan())
        self.passes += 1
        token = logs.PASS.set(self.passes)
        statements, started = database.statements(), time.perf_counter()
        try:
            report = self._pass()
        finally:
            logs.PASS.reset(token)
        report.statements = database.statements() - statements
        report.seconds = time.perf_counter() - started
        PASS_SECONDS.observe(report.seconds)
        PASS_STATEMENTS.observe(report.statements)
        log.info(
            "pass %d: %d action(s), %d SQL statement(s), %.2f s",
            self.passes,
            len(report.plan.actions),
            report.statements,
            report.seconds,
            extra={"pass": self.passes},
        )
        return report

    def _pass(self) -> PassReport:
        with self.sessions() as s:
            self.provisioner.refresh(s)
            for failed in take_failed(self.provisioner, s):  # its nodes ran, and are billed
                self.teardown.meter_pool(s, failed)
            for pool in self.provisioner.deleting(s):  # a pass died while deleting it
                self.teardown.delete_pool(s, pool.name, pool.state_reason or "deleting")
            # Closed hours of running pools are charged now, not when the pool goes, so that
            # budgets see them; reservations whose spend is all posted are let go.
            self.teardown.meter_live(s)
            report = PassReport(Plan())
            self.remote.dispatch_ready(s, report.outcomes)
            self.remote.follow(s, report.outcomes)
            # Read after following: a cluster's grace may run out while its copies are listed.
            lost = [t for t in self.targets if self.remote.health.lost(t)]
            if lost:
                self._let_lost_clusters_go(s, lost)
                self.remote.requeue_gone(s, report.outcomes)  # those whose pools went now
            self.guard.check(s, report.outcomes)  # runs a hard budget cannot cover are stopped
            self._alert(s)
            silent = self.remote.silent()
            report.plan = self._plan(s, silent)
            refused = self._act(s, report.plan)
            # A pool refused for capacity backs its offer off at once; plan again in this pass,
            # so its workloads go to the next-best offer now rather than a pass later.
            for _ in range(CAPACITY_REPLANS):
                if not refused:
                    break
                self.remote.dispatch_ready(s, report.outcomes)  # theirs go back to the queue
                report.plan = self._plan(s, silent)
                refused = self._act(s, report.plan)
            return report

    def _alert(self, s: Session) -> None:
        """Budget thresholds crossed since the last pass: logged, counted, and told on the jobs
        of the budget's scope that are bursting. A new process tells again those crossed in
        the current period (at least once, rather than never)."""
        if not self.budgets:
            return
        now = self.clock.now()
        crossed = alerts.budget_alerts(
            s, self.thresholds, now, self.service.usd_rates(now), self.alerts_seen
        )
        if crossed:
            alerts.deliver(s, crossed, {b.name: b for b in self.budgets}, self.replicator.events)

    def _let_lost_clusters_go(self, s: Session, lost: list[str]) -> None:
        """A cloud cluster silent past its grace: its pools are deleted through the cloud's own
        API (another way in), and its jobs resume on-prem once they are gone, so that no copy
        runs there beside its original, and nothing is paid for nodes burst cannot use."""
        for target in lost:
            for name in s.scalars(
                select(Pool.name).where(Pool.target == target, Pool.state.in_(LIVE_STATES))
            ).all():
                self.teardown.delete_pool(s, name, f"{target}'s cluster stopped answering")
            tell_waiting_for_deletion(s, target, self.observer, self.replicator.events)

    def _plan(self, s: Session, silent: tuple[str, ...]) -> Plan:
        known: dict[str, str] = {
            uid: state for uid, state in s.execute(select(Workload.uid, Workload.state))
        }
        used: dict[str, list[tuple[int, datetime | None]]] = {}
        planned_on: dict[str, str] = {}  # the pool each planned workload waits on
        now = self.clock.now()
        for uid, dispatch, gpus, pods, runtime_s, started, name in s.execute(
            select(
                Workload.uid,
                DispatchRow.state,
                Workload.gpus_per_pod,
                Workload.pods,
                Workload.expected_runtime_s,
                DispatchRow.started_at,
                Pool.name,
            )
            .join(DispatchRow, DispatchRow.workload_id == Workload.id)
            .join(Pool, Pool.id == DispatchRow.pool_id)
            .where(DispatchRow.state.in_(ACTIVE))
        ):
            # Expected to end a runtime after its copy started (past that, as runtimes.run_end
            # says), or, not running yet, a runtime from now (unknown without a runtime).
            begun = started or now
            told = None if runtime_s is None else begun + timedelta(seconds=runtime_s)
            end = None if told is None else run_end(begun, told, now)
            used.setdefault(name, []).extend([(gpus, end)] * pods)
            if dispatch == "planned":
                planned_on[uid] = name
        pending = []
        for w in self.observer.workloads():
            state = known.get(w.uid)
            if state in (None, "pending", "requeued"):  # requeued: its copy was lost, no spot
                pending.append(replace(w, lost_copy=True) if state == "requeued" else w)
            elif state == "planned":  # the plan may move it off a pool that launches late
                pending.append(replace(w, phase="planned", planned_pool=planned_on.get(w.uid)))
        QUEUE.set(len(pending))
        # A pool with work is busy whatever its state (one grown for new work is `resizing`);
        # a ready one without is idle from the first pass that sees it so.
        for name in used:
            self.teardown.idle_since.pop(name, None)
        for name in s.scalars(select(Pool.name).where(Pool.state == "ready")):
            if name not in used:
                self.teardown.idle_since.setdefault(name, now)
        snapshot = Snapshot(
            taken_at=now,
            workloads=tuple(pending),
            onprem=self.observer.onprem(),
            pools=tuple(pool_views(s, used, self.teardown.idle_since)),
            budgets=budget_views(s, self.budgets, self.service.usd_rates(now), now),
            unavailable=tuple(self.unavailable.current()),
            silent_targets=silent,
            sent_last_hour=sent_last_hour(s, now, self.config),
        )
        with DECISION_SECONDS.time():
            plan = decide.plan(snapshot, self.catalog, self.config, now)
        self._log_skips(plan)
        return plan

    def _log_skips(self, plan: Plan) -> None:
        """Why each burstable workload stays on-prem, logged and recorded as an Event on the job
        when the kind of reason first appears or changes (a refusal, a budget, a cap), not on
        every pass: the words before the first colon, since the rest carries estimates that move
        each pass. An Event that cannot be sent now is tried again next pass."""
        reasons = {k.workload: k.reason.split(":", 1)[0] for k in plan.skips}
        for k in plan.skips:
            if self.skipped.get(k.workload) == reasons[k.workload]:
                continue
            log.info(
                "not bursting %s/%s: %s",
                k.namespace,
                k.name,
                k.reason,
                extra={"workload": f"{k.namespace}/{k.name}", "reason": k.reason},
            )
            obj = self.observer.object(k.workload)
            try:
                if obj is not None:
                    self.replicator.events.record(obj, "Normal", "NotBursting", k.reason)
            except CLUSTER_ERRORS:
                del reasons[k.workload]
        self.skipped = reasons

    def _act(self, s: Session, plan: Plan) -> list[str]:
        """Carry the plan out; returns the pools the cloud refused at once."""
        refused = []
        dispatches = []
        stay = self.intents.cancel_moved(s, plan.actions)  # first: before their new dispatches
        for action in _fresh_names(s, plan.actions):
            if isinstance(action, CreatePool):
                if self.provisioner.create(s, action).state == "failed":
                    refused.append(action.pool)
            elif isinstance(action, ResizePool):
                self.provisioner.resize(s, action.pool, action.nodes)
            elif isinstance(action, Dispatch) and action.workload not in stay:
                dispatches.append(action)  # recorded together, once their pools have rows
            elif isinstance(action, DeletePool):
                self.teardown.delete_pool(s, action.pool, action.reason)
        self.intents.record(s, dispatches, self.observer.workloads())
        # Planned dispatches are intents for the next pass, which replicates them: one commit for
        # all of them (a pass that dies before it loses only plans, and the next pass plans again).
        s.commit()
        return refused

    def refresh_prices(self) -> list[str]:
        """Ask every provider that has live prices for them; the catalog keeps the last good ones."""
        problems: list[str] = []
        for target, provider in sorted(self.provisioner.providers.items()):
            refresh = getattr(provider, "refresh_prices", None)
            if refresh is not None:
                problems += [f"{target}: {p}" for p in refresh()]
        return problems


def budget_views(
    s: Session, budgets: Sequence[ledger.BudgetLimit], rates: Mapping[str, Decimal], now: datetime
) -> tuple[BudgetView, ...]:
    """What is left of each budget: its amount less posted spend and held reservations."""
    return tuple(
        BudgetView(b.name, b.scope, b.value, b.amount - ledger.used(s, b, now, rates), b.hard)
        for b in budgets
    )


def _fresh_names(s: Session, actions: Sequence[Action]) -> list[Action]:
    """The plan names new pools one generation past the live ones; a name a failed or deleted
    pool once had (pool names are unique for ever: bills and the ledger find pools by them) moves
    on to the next free generation, in the plan's dispatches too."""
    renamed: dict[str, str] = {}
    planned = {a.pool for a in actions if isinstance(a, CreatePool)}  # not free either
    for a in actions:
        if isinstance(a, CreatePool) and s.scalar(select(Pool.id).where(Pool.name == a.pool)):
            stem, _, _ = a.pool.rpartition("-")
            taken = set(s.scalars(select(Pool.name).where(Pool.name.startswith(f"{stem}-"))))
            taken |= planned | set(renamed.values())
            generation = 1
            while f"{stem}-{generation}" in taken:
                generation += 1
            renamed[a.pool] = f"{stem}-{generation}"
    if not renamed:
        return list(actions)
    return [
        replace(a, pool=renamed[a.pool]) if getattr(a, "pool", None) in renamed else a
        for a in actions
    ]


def tell_waiting_for_deletion(
    s: Session, target: str, observer: Observer, events: EventRecorder
) -> None:
    """A deletion the cloud refuses or takes long over keeps the lost cluster's jobs suspended
    here (their copies may still run): each says why, once."""
    for uid, pool in s.execute(
        select(Workload.uid, Pool.name)
        .join(DispatchRow, DispatchRow.workload_id == Workload.id)
        .join(Pool, Pool.id == DispatchRow.pool_id)
        .where(Pool.target == target, Pool.state == "deleting", DispatchRow.state.in_(ACTIVE))
    ):
        obj = observer.object(uid)
        if obj is None:
            continue
        why = (
            f"{target} stopped answering; this job resumes here once the cloud has "
            f"deleted pool {pool}, where its copy may still run"
        )
        try:
            events.record(obj, "Warning", "WaitingForPoolDeletion", why)
        except CLUSTER_ERRORS as exc:
            log.warning("event on %s: %s", uid, exc)


def sent_last_hour(s: Session, now: datetime, config: Config) -> dict[str, int]:
    """How many workloads each policy sent to a cloud in the hour up to `now`, by its dispatches;
    not asked of the database when no policy chooses its idle TTL against the next arrival, the
    only reader."""
    if all(p.spec.teardown.idle_ttl_choice != "next-arrival" for p in config.policies.values()):
        return {}
    return {
        policy: int(n)
        for policy, n in s.execute(
            select(Pool.policy, func.count())
            .join(DispatchRow, DispatchRow.pool_id == Pool.id)
            .where(DispatchRow.created_at > now - SENT_WINDOW)
            .group_by(Pool.policy)
        )
    }
