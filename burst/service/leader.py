"""The long-running service: once elected, take the fencing epoch and run the reconcile pass and
its companions (orphan GC, price refresh) on an APScheduler schedule, each coalesced with at most
one instance running; reconcile is also woken by watch changes, batched, so a burst of new pods is
one plan.

Only the leader mutates. On winning the Lease it increments the fencing epoch in the database; the
Reconciler's sessions (db.fenced_sessions) check that epoch in every committing transaction, and
a replica that loses the Lease, or finds a newer epoch, exits at once and lets Kubernetes restart
it as a follower. app.py builds a Service; followers serve the read-only API meanwhile.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from burst.clock import Clock
from burst.config import Config
from burst.model import Plan
from burst.service.loop import Reconciler
from burst.store.database import Fenced
from burst.store.tables import Leadership

log = logging.getLogger(__name__)


def take_epoch(sessions: sessionmaker[Session], identity: str, clock: Clock) -> int:
    """Become the writer: one more than any epoch before."""
    with sessions.begin() as s:
        row = s.get(Leadership, 1, with_for_update=True)
        if row is None:
            row = Leadership(id=1, epoch=0, holder=identity, acquired_at=clock.now())
            s.add(row)
        row.epoch, row.holder, row.acquired_at = row.epoch + 1, identity, clock.now()
        return int(row.epoch)


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
            args=[
                lambda: reconciler.teardown.collect_orphans(
                    self.cfg.service.spec.graces.orphan_pool
                )
            ],
            seconds=intervals.orphan_gc.total_seconds(),
            id="orphan-gc",
        )
        scheduler.add_job(
            self._guarded,
            "interval",
            args=[lambda: reconciler.remote.collect(reconciler.sessions)],
            seconds=intervals.orphan_gc.total_seconds(),
            id="remote-gc",
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
        try:
            for line in work() or []:
                log.warning("%s", line)
        except Fenced as exc:
            self._fenced(exc)

    def _pass(self, reconciler: Reconciler) -> None:
        try:
            with self._lock:
                self.last_plan = reconciler.run_once().plan
        except Fenced as exc:
            self._fenced(exc)

    def _fenced(self, exc: Fenced) -> None:
        # Someone newer leads: this replica's writes are refused; stop at once.
        log.error("%s: %s; exiting", self.identity, exc)
        self.exit(1)

    def lost(self) -> None:
        log.error("%s lost the lease; exiting", self.identity)
        self.exit(1)
