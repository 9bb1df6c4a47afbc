"""The composition root of `burst serve`: configuration, database, clusters, clouds and clock wired
into a Reconciler, a scheduler that runs it, leader election, and the HTTP API.

Only the leader mutates. On winning the Lease it increments the fencing epoch in the database;
every reconcile pass first checks that the epoch is still its own, and a replica that loses the
Lease (or finds a newer epoch) exits at once and lets Kubernetes restart it as a follower.
Followers serve the read-only API.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from burst import catalog, config, db, ledger
from burst.catalog import UnavailableOffers
from burst.clock import Clock, SystemClock
from burst.config import Config, KubernetesAccess
from burst.events import EventRecorder
from burst.model import Plan
from burst.money import Money
from burst.provider import Provider
from burst.provision import Provisioner
from burst.reconciler import Reconciler
from burst.replicate import KubeObjects, Replicator
from burst.sync import Syncer
from burst.tables import Leadership
from burst.watch import Observer

log = logging.getLogger(__name__)


def kube_client(access: KubernetesAccess) -> Any:
    """An ApiClient from in-cluster credentials or a kubeconfig (and context)."""
    from kubernetes import client
    from kubernetes import config as kube_config

    if access.in_cluster:
        configuration = client.Configuration()
        kube_config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    return kube_config.new_client_from_config(config_file=access.kubeconfig, context=access.context)


def budget_limits(cfg: Config) -> list[ledger.BudgetLimit]:
    out = []
    for name, b in sorted(cfg.budgets.items()):
        scope = b.spec.scope
        kind: ledger.ScopeKind = "team" if scope.team else "policy" if scope.policy else "namespace"
        out.append(
            ledger.BudgetLimit(
                name,
                kind,
                scope.team or scope.policy or scope.namespace or "",
                Money.of(b.spec.amount, b.spec.currency),
                b.spec.period,
                b.spec.enforcement == "hard",
            )
        )
    return out


def reconciler_for(
    cfg: Config,
    offers: catalog.Catalog,
    clock: Clock,
    sessions: sessionmaker[Session],
    observer: Observer,
    onprem: Any,
    remote_apis: Mapping[str, Any],
    providers: Mapping[str, Provider],
    *,
    epoch: int = 1,
    launch_factor: int = 3,
) -> Reconciler:
    """The reconcile pass and its collaborators, for `burst serve` and `burst demo` alike."""
    assert cfg.service is not None
    spec = cfg.service.spec
    events = EventRecorder(onprem, clock)
    local = KubeObjects(onprem)
    return Reconciler(
        config=cfg,
        catalog=offers,
        clock=clock,
        sessions=sessions,
        observer=observer,
        local=local,
        remotes={n: KubeObjects(a) for n, a in remote_apis.items()},
        provisioner=Provisioner(
            providers,
            clock,
            UnavailableOffers(clock),
            spec.installation_id,
            epoch,
            launch_timeouts={t.name: launch_factor * t.provisioning for t in spec.targets},
        ),
        replicator=Replicator(local, events, spec.installation_id),
        syncer=Syncer(local, events, clock, spec.installation_id),
        budgets=budget_limits(cfg),
    )


def take_epoch(sessions: sessionmaker[Session], identity: str, clock: Clock) -> int:
    """Become the writer: one more than any epoch before."""
    with sessions.begin() as s:
        row = s.get(Leadership, 1, with_for_update=True)
        if row is None:
            row = Leadership(id=1, epoch=0, holder=identity, acquired_at=clock.now())
            s.add(row)
        row.epoch, row.holder, row.acquired_at = row.epoch + 1, identity, clock.now()
        return int(row.epoch)


def current_epoch(sessions: sessionmaker[Session]) -> int:
    with sessions() as s:
        return int(s.scalar(select(Leadership.epoch).where(Leadership.id == 1)) or 0)


@dataclass
class Service:
    cfg: Config
    identity: str
    clock: Clock
    sessions: sessionmaker[Session]
    onprem: Any
    reconciler_factory: Callable[[int], Reconciler]
    epoch: int = 0
    last_plan: Plan | None = None
    exit: Callable[[int], None] = os._exit
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def lead(self) -> None:
        """Called when the Lease is won: take the epoch, then reconcile on a schedule."""
        from apscheduler.schedulers.background import BackgroundScheduler

        assert self.cfg.service is not None
        self.epoch = take_epoch(self.sessions, self.identity, self.clock)
        log.warning("%s leads with epoch %d", self.identity, self.epoch)
        reconciler = self.reconciler_factory(self.epoch)
        scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1})
        intervals = self.cfg.service.spec.intervals
        scheduler.add_job(
            self._pass,
            "interval",
            args=[reconciler],
            seconds=intervals.reconcile.total_seconds(),
            id="reconcile",
            next_run_time=self.clock.now(),
        )
        scheduler.add_job(
            self._guarded,
            "interval",
            args=[reconciler.collect_orphans],
            seconds=intervals.orphan_gc.total_seconds(),
            id="orphan-gc",
        )
        scheduler.add_job(
            self._guarded,
            "interval",
            args=[reconciler.refresh_prices],
            seconds=intervals.price_refresh.total_seconds(),
            id="price-refresh",
            next_run_time=self.clock.now(),
        )
        scheduler.start()
        # A burst of new pods is one plan: wake the reconcile job a moment after the watch saw changes.
        threading.Thread(
            target=self._wake_on_changes, args=[scheduler, reconciler], daemon=True
        ).start()

    def _wake_on_changes(
        self, scheduler: Any, reconciler: Reconciler, batch_s: float = 1.5
    ) -> None:
        changed = reconciler.observer.changed
        while True:
            changed.wait()
            time.sleep(batch_s)
            changed.clear()
            scheduler.modify_job("reconcile", next_run_time=self.clock.now())

    def _guarded(self, work: Callable[[], Any]) -> None:
        if current_epoch(self.sessions) != self.epoch:
            self.exit(1)
            return
        for line in work() or []:
            log.warning("%s", line)

    def _pass(self, reconciler: Reconciler) -> None:
        if current_epoch(self.sessions) != self.epoch:  # someone newer leads: stop writing at once
            log.error("%s: epoch %d is no longer current; exiting", self.identity, self.epoch)
            self.exit(1)
            return
        with self._lock:
            self.last_plan = reconciler.run_once().plan

    def lost(self) -> None:
        log.error("%s lost the lease; exiting", self.identity)
        self.exit(1)


def build(config_dir: Path, identity: str, clock: Clock | None = None) -> Service:
    """Everything `burst serve` needs, from the configuration folder."""
    import providers

    clock = clock or SystemClock()
    shipped = catalog.shipped()
    cfg = config.load([config_dir], config.Vocabulary(shipped.regions(), shipped.accelerators()))
    if cfg.service is None:
        raise config.ConfigError([])
    spec = cfg.service.spec
    offers = shipped.with_overrides(spec.catalog)
    engine = db.make_engine(db.resolve_url(None, spec.database))
    db.check(engine)
    sessions = db.sessions(engine)
    onprem = kube_client(spec.on_prem)
    remote_apis = {t.name: kube_client(t.kubernetes) for t in spec.targets}
    built = providers.build(cfg.service, offers, clock, kube_for=lambda t: remote_apis[t.name])
    observer = Observer(
        onprem,
        clock,
        EventRecorder(onprem, clock),
        label_prefix=spec.label_prefix,
        team_label=spec.team_label,
    )

    def reconciler(epoch: int) -> Reconciler:
        if not observer.caches[0].synced.is_set():
            observer.start()
            observer.wait_synced()
        return reconciler_for(
            cfg, offers, clock, sessions, observer, onprem, remote_apis, built, epoch=epoch
        )

    return Service(cfg, identity, clock, sessions, onprem, reconciler)


def run(service: Service, *, host: str | None = None, port: int | None = None) -> None:
    """Serve the API and stand for election until the process ends."""
    import uvicorn
    from kubernetes import client
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    from burst.api import create_app

    assert service.cfg.service is not None
    spec = service.cfg.service.spec
    token = Path(spec.api.token_file).read_text().strip() if spec.api.token_file else None
    app = create_app(
        service.sessions,
        token=token,
        budgets=budget_limits(service.cfg),
        rates=dict(spec.usd_exchange_rates),
        last_plan=lambda: service.last_plan,
        now=service.clock.now,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=host or spec.api.host, port=port or spec.api.port, log_level="warning"
        )
    )
    threading.Thread(target=server.run, name="api", daemon=True).start()
    # The client's election reads the default configuration: point it at the on-prem cluster.
    client.Configuration.set_default(service.onprem.configuration)
    election = spec.leader_election
    duration = int(election.lease_duration.total_seconds())
    lock = LeaseLock(election.lease_name, election.namespace, service.identity)
    leader = leaderelection.LeaderElection(
        electionconfig.Config(
            lock,
            lease_duration=duration,
            renew_deadline=max(2, duration * 2 // 3),
            retry_period=max(1.5, duration / 5),
            onstarted_leading=service.lead,
            onstopped_leading=service.lost,
        )
    )
    leader.run()
    service.lost()  # run() returns only when leadership ends
