"""Carry out pool actions through a Provider, with the intent in the database before each cloud call.

A pool's row is written (state `requested`, with its idempotency token) before `create_pool` is
called, so a crash between the two leaves a row the next pass completes with the same token; every
state change is a PoolEvent, which the meter reads. A capacity error marks the offer unavailable for
a while (the next plan picks the next-best offer); other errors fail the pool with the reason.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from burst import failpoints
from burst.amounts import Money
from burst.clock import Clock
from burst.cloud.backoff import Backoffs
from burst.cloud.catalog import UnavailableOffers
from burst.cloud.provider import (
    CapacityUnavailable,
    PoolNotFound,
    PoolSpec,
    Provider,
    ProviderError,
)
from burst.cloud.provider import Instance as CloudInstance
from burst.cloud.provider import Pool as CloudPool
from burst.metrics import PROVIDER_CALLS
from burst.model import CapacityType, Cloud, CreatePool, OfferKey, PoolState, PoolView
from burst.store.tables import Pool, PoolEvent, PoolInstance

log = logging.getLogger(__name__)
LIVE = ("requested", "creating", "ready", "resizing", "draining")
DEFAULT_LAUNCH_TIMEOUT = timedelta(minutes=45)  # the slowest GPU pools take tens of minutes


def _event(
    session: Session, pool: Pool, to: str, nodes: int, at: datetime, reason: str | None, epoch: int
) -> None:
    session.add(
        PoolEvent(
            pool_id=pool.id,
            at=at,
            from_state=pool.state,
            to_state=to,
            nodes=nodes,
            reason=reason,
            epoch=epoch,
        )
    )
    # Every transition is a log line too, a failure (a launch timeout, a capacity refusal) as a
    # warning: the pool's story can be read from the logs as from its events.
    log.log(
        logging.WARNING if to == "failed" else logging.INFO,
        "pool %s: %s -> %s%s",
        pool.name,
        pool.state,
        to,
        f": {reason}" if reason else "",
        extra={"pool": pool.name, "target": pool.target, "state": to, "reason": reason},
    )
    pool.state, pool.nodes_desired, pool.updated_at = to, nodes, at
    if to == "ready":  # what a resize adds is on its way until the pool is ready again
        pool.nodes_ready = nodes
    if to == "failed" and pool.deleted_at is None:
        # Its instances are billed from their launch until the cloud is asked to let them go:
        # now (a launch that failed or timed out is deleted at once; a pool the cloud lost was
        # gone by now). The meter charges it to here.
        pool.deleted_at = at
    if reason:
        pool.state_reason = reason


def offer_of(row: Pool) -> OfferKey:
    """The offer a pool row was launched from (`provider` is the cloud whose offer it is; a
    simulated target borrows one)."""
    return OfferKey(
        cast(Cloud, row.provider),
        row.region,
        row.instance_type,
        cast(CapacityType, row.capacity),
        row.accelerator,
        row.gpus_per_node,
    )


class Provisioner:
    def __init__(
        self,
        providers: Mapping[str, Provider],
        clock: Clock,
        unavailable: UnavailableOffers,
        installation: str,
        epoch: int = 1,
        launch_timeouts: Mapping[str, timedelta] | None = None,
        zones: Callable[[OfferKey], tuple[str, ...]] = lambda offer: (),
        joined: Callable[[str, str], int | None] = lambda target, pool: None,
    ) -> None:
        self.providers, self.clock, self.unavailable = providers, clock, unavailable
        # Where an offer's GPU exists in its region; a pool goes to the first (one zone).
        self.zones = zones
        # How many of a pool's nodes have joined its cluster with allocatable GPUs (target,
        # pool); None where burst cannot see the cluster: the cloud's word is taken then.
        self.joined = joined
        self.backoffs = Backoffs(unavailable)
        self.installation, self.epoch = installation, epoch
        # Per target: how long a pool may take to be ready before it counts as failed.
        self.launch_timeouts = dict(launch_timeouts or {})
        self._restored = False
        # Pools that failed after their launch, for the caller to meter: their nodes were billed.
        self.failed: list[str] = []

    def call(self, target: str, operation: str, *args: Any) -> Any:
        """A provider call, timed and counted by outcome (ok, or the error's type)."""
        start = time.perf_counter()
        outcome = "ok"
        try:
            return getattr(self.providers[target], operation)(*args)
        except ProviderError as exc:
            outcome = type(exc).__name__
            raise
        finally:
            PROVIDER_CALLS.labels(target, operation, outcome).observe(time.perf_counter() - start)

    def launch_timeout(self, row: Pool) -> timedelta:
        return self.launch_timeouts.get(row.target, DEFAULT_LAUNCH_TIMEOUT)

    def create(self, session: Session, action: CreatePool) -> Pool:
        now = self.clock.now()
        row = Pool(
            name=action.pool,
            token=uuid.uuid4().hex,
            target=action.target,
            provider=action.offer.cloud,
            region=action.offer.region,
            zone=next(iter(self.zones(action.offer)), None),
            instance_type=action.offer.instance_type,
            capacity=action.offer.capacity,
            accelerator=action.offer.accelerator,
            gpus_per_node=action.offer.gpus,
            nodes_desired=action.nodes,
            policy=action.policy,
            state="requested",
            unit_price_micros=action.hourly.micros,
            currency=action.hourly.currency,
            price_source="catalog",
            epoch=self.epoch,
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        session.flush()
        session.add(
            PoolEvent(
                pool_id=row.id,
                at=now,
                from_state=None,
                to_state="requested",
                nodes=action.nodes,
                reason=action.reason,
                epoch=self.epoch,
            )
        )
        session.commit()  # the intent is durable before the cloud hears of it
        failpoints.hit("pool-intent-recorded")
        self.complete(session, row)
        return row

    def spec(self, row: Pool) -> PoolSpec:
        return PoolSpec(
            name=row.name,
            offer=offer_of(row),
            nodes=row.nodes_desired,
            owner=self.installation,
            policy=row.policy,
            epoch=row.epoch,
            zones=(row.zone,) if row.zone else (),
        )

    def arrived(self, row: Pool, pool: CloudPool) -> bool:
        """Ready is when the cloud says so and the nodes have joined the cluster with allocatable
        GPUs (a node group ACTIVE with no device plugin running runs no GPU job)."""
        if pool.phase != "ready":
            return False
        joined = self.joined(row.target, row.name)
        return joined is None or joined >= pool.nodes

    def complete(self, session: Session, row: Pool) -> None:
        """Ask the cloud for a `requested` pool (again, with the same token, after a crash)."""
        now = self.clock.now()
        try:
            pool = self.call(row.target, "create_pool", self.spec(row), row.token)
        except CapacityUnavailable as exc:
            self.backoffs.mark(session, self.spec(row).offer)
            _event(session, row, "failed", 0, now, f"capacity: {exc.message}", self.epoch)
            session.commit()
            return
        except ProviderError as exc:
            if exc.retryable:
                log.warning("pool %s: %s; will try again", row.name, exc.message)
                return
            # Permanent for this offer: backed off, or every pass would ask for it again.
            self.backoffs.mark(session, self.spec(row).offer)
            _event(session, row, "failed", 0, now, exc.message, self.epoch)
            session.commit()
            return
        failpoints.hit("pool-created-in-cloud")
        row.external_id = pool.external_id
        record_instances(session, row, pool.instances)
        ready = self.arrived(row, pool)
        _event(session, row, "ready" if ready else "creating", pool.nodes, now, None, self.epoch)
        if ready:
            row.ready_at = now
        session.commit()

    def refresh(self, session: Session) -> None:
        """Follow launching pools to ready (or failed), and resizing ones back to ready."""
        if not self._restored:
            self.backoffs.restore(session)
            self._restored = True
        for row in session.scalars(
            select(Pool).where(Pool.state.in_(("requested", "creating", "resizing")))
        ).all():
            if row.state == "requested":
                self.complete(session, row)
                continue
            try:
                pool = self.call(row.target, "get_pool", row.name)
            except PoolNotFound:
                _event(
                    session,
                    row,
                    "failed",
                    0,
                    self.clock.now(),
                    "the cloud lost the pool",
                    self.epoch,
                )
                self.failed.append(row.name)
                continue
            except ProviderError as exc:
                log.warning("pool %s: %s", row.name, exc.message)
                continue
            record_instances(session, row, pool.instances)
            if row.state == "resizing":
                self._follow_resize(session, row, pool)
            else:
                self._follow_launch(session, row, pool)
        session.commit()

    def _follow_launch(self, session: Session, row: Pool, pool: CloudPool) -> None:
        now = self.clock.now()
        if self.arrived(row, pool):
            row.ready_at = now
            self.backoffs.recovered(session, self.spec(row).offer)
            _event(session, row, "ready", pool.nodes, now, None, self.epoch)
        else:
            waited = now - row.created_at
            if pool.phase == "failed":
                reason = pool.message or "the cloud reports the launch failed"
            elif waited > self.launch_timeout(row):
                reason = f"not ready after {int(waited.total_seconds())} s (launch timeout)"
            else:
                return
            _give_up(self, session, row, pool.nodes, reason)

    def _follow_resize(self, session: Session, row: Pool, pool: CloudPool) -> None:
        """A resize has a clock of its own, from when it was asked (the row's last change). Its
        pool keeps running its jobs whatever becomes of the new nodes: a resize that fails or
        takes too long ends with the pool at the size it reached, the offer backed off."""
        now = self.clock.now()
        if self.arrived(row, pool):
            _event(session, row, "ready", pool.nodes, now, None, self.epoch)
        elif pool.phase == "failed" or now - row.updated_at > self.launch_timeout(row):
            self.backoffs.mark(session, self.spec(row).offer)
            why = pool.message if pool.phase == "failed" else "timed out"
            reason = f"resize to {row.nodes_desired} nodes {why}; keeps {pool.nodes}"
            log.warning("pool %s: %s", row.name, reason)
            _event(session, row, "ready", pool.nodes, now, reason, self.epoch)

    def resize(self, session: Session, name: str, nodes: int) -> None:
        """Grow or shrink a pool. A launching pool launches on at its new size; a ready one is
        `resizing` until the cloud says it is done, and runs its jobs meanwhile."""
        row = session.scalar(select(Pool).where(Pool.name == name))
        if row is None or row.state not in LIVE:
            return
        try:
            pool = self.call(row.target, "resize_pool", name, nodes)
        except ProviderError as exc:
            log.warning("resize %s: %s", name, exc.message)
            if not exc.retryable:
                self.backoffs.mark(session, self.spec(row).offer)
                session.commit()
            return
        record_instances(session, row, pool.instances)
        if row.state in ("requested", "creating"):
            state = "creating"
        else:
            state = "ready" if pool.phase == "ready" else "resizing"
        _event(session, row, state, nodes, self.clock.now(), None, self.epoch)
        session.commit()

    def delete(self, session: Session, name: str, reason: str) -> Pool | None:
        """Delete in the cloud (again, if a pass died half way); the caller meters, then marks it deleted."""
        row = session.scalar(select(Pool).where(Pool.name == name))
        if row is None or row.state in ("deleted", "failed"):
            return None
        self.mark_deleting(session, row, reason)
        look(self, session, row)  # the last look at its instances, ended ones included
        try:
            self.call(row.target, "delete_pool", name)
            # Done when the cloud says the pool is gone, not when it took the request (GKE's
            # STOPPING, EKS's DELETING still bill): until then it stays `deleting`, metered.
            still = self.call(row.target, "get_pool", name)
        except PoolNotFound:
            still = None
        except ProviderError as exc:
            log.warning("delete %s: %s; will try again", name, exc.message)
            return None
        if still is not None:
            log.info("pool %s: the cloud is deleting it (%s)", name, still.phase)
            return None
        failpoints.hit("pool-deleted-in-cloud")
        if row.deleted_at is None:
            row.deleted_at = gone_at(self, session, row)
            if row.deleted_at is None:
                log.info("pool %s: gone; its instances' ends asked again next pass", name)
                return None
            session.commit()
        return row

    def mark_deleting(self, session: Session, row: Pool, reason: str) -> None:
        """A deletion under way: each pass deletes such pools again until the cloud has."""
        if row.state != "deleting":
            _event(
                session, row, "deleting", row.nodes_desired, self.clock.now(), reason, self.epoch
            )
            session.commit()

    def mark_deleted(self, session: Session, row: Pool) -> None:
        at = row.deleted_at or self.clock.now()
        _event(session, row, "deleted", 0, at, row.state_reason, self.epoch)
        session.commit()

    def deleting(self, session: Session) -> list[Pool]:
        return list(session.scalars(select(Pool).where(Pool.state == "deleting")))


def _give_up(p: Provisioner, session: Session, row: Pool, nodes: int, reason: str) -> None:
    """A launch that failed or timed out: the offer backed off and the pool let go (a failed
    node group or a pool running with errors may still hold billed nodes). One whose deletion
    the cloud refuses may run on: it is a pool being deleted (counted against maxPools, billed
    until the cloud ends it, its deletion asked again each pass)."""
    now = p.clock.now()
    p.backoffs.mark(session, p.spec(row).offer)
    _event(session, row, "failed", nodes, now, reason, p.epoch)
    p.failed.append(row.name)
    try:
        p.call(row.target, "delete_pool", row.name)
    except ProviderError as exc:
        log.warning("pool %s: %s", row.name, exc.message)
        row.deleted_at = None
        refused = f"{reason}; its deletion was refused: {exc.message}"
        _event(session, row, "deleting", nodes, now, refused, p.epoch)


def take_failed(provisioner: Provisioner, session: Session) -> list[Pool]:
    """The pools that failed since the last call, read in `session`: a pass that died after one
    failed left it to the next, whose session is another (the row of the first, expired by its
    rollback, could no longer be read)."""
    names, provisioner.failed = provisioner.failed, []
    return list(session.scalars(select(Pool).where(Pool.name.in_(names)))) if names else []


def look(provisioner: Provisioner, session: Session, row: Pool) -> None:
    """Record the pool's instances as the cloud reports them now, if it does (the meter bills
    them); a pool the cloud does not answer for is left to the passes that follow it."""
    with contextlib.suppress(ProviderError):
        pool = provisioner.call(row.target, "get_pool", row.name)
        record_instances(session, row, pool.instances)


def gone_at(provisioner: Provisioner, session: Session, row: Pool) -> datetime | None:
    """When a pool burst has just found gone stopped running: its instances' last end where
    the cloud still lists them (a scan or a pass that runs late would bill the minutes between
    the cloud's end and burst's look), else now; None when the cloud would not say now (a
    throttled call): the caller asks again later rather than bill to its own look."""
    now = provisioner.clock.now()
    try:
        instances: tuple[CloudInstance, ...] | None = provisioner.call(
            row.target, "ended_instances", row.name
        )
    except ProviderError:
        return None
    record_instances(session, row, instances)
    ends = [i.ended for i in instances or ()]
    if not ends or None in ends:
        return now
    return min(now, max(e for e in ends if e is not None))


def record_instances(
    session: Session, row: Pool, instances: tuple[CloudInstance, ...] | None
) -> None:
    """The pool's instances as its cloud reports them: new ones added, ended ones closed. An
    instance the cloud replaced between two looks (a reclaimed spot node) is still reported
    ended, and is billed on its own."""
    if instances is None:
        return
    known = {
        i.instance_id: i
        for i in session.scalars(select(PoolInstance).where(PoolInstance.pool_id == row.id))
    }
    for instance in instances:
        seen = known.get(instance.id)
        if seen is None:
            session.add(
                PoolInstance(
                    pool_id=row.id,
                    instance_id=instance.id,
                    launched=instance.launched,
                    ended=instance.ended,
                )
            )
        elif seen.ended is None and instance.ended is not None:
            seen.ended = instance.ended


def pool_views(
    session: Session,
    used: Mapping[str, list[tuple[int, datetime | None]]],
    idle_since: Mapping[str, datetime],
) -> list[PoolView]:
    """Live pools as the decision sees them; `used` gives the GPUs each pod of the pool's
    workloads takes and when it is expected to end (None: not known; then no node's end is
    shown). Those draining or being deleted take no work but count against maxPools: their
    nodes run."""
    out = []
    for row in session.scalars(select(Pool).where(Pool.state.in_((*LIVE, "deleting")))):
        free = [row.gpus_per_node] * row.nodes_desired
        busy: list[datetime | None] = [None] * row.nodes_desired
        known = True
        for gpus, end in used.get(row.name, []):
            known = known and end is not None
            for i, f in enumerate(free):
                if f >= gpus:
                    free[i] = f - gpus
                    if end is not None:
                        busy[i] = max(end, busy[i] or end)
                    break
        offer = offer_of(row)
        # A resizing pool runs its jobs: ready, with room on the nodes on their way, asked for
        # at its last change (the decision dates work there from when they are expected up).
        shown = {"requested": "creating", "resizing": "ready"}.get(row.state, row.state)
        growing = row.state == "resizing" and row.nodes_ready < row.nodes_desired
        out.append(
            PoolView(
                name=row.name,
                target=row.target,
                policy=row.policy,
                offer=offer,
                nodes=row.nodes_desired,
                state=cast(PoolState, shown),
                created=row.created_at,
                free_gpus=tuple(free),
                idle_since=idle_since.get(row.name),
                # as its dispatches reserve it (intents.py), not as the catalog prices it now
                hourly=Money(row.unit_price_micros, row.currency),
                busy_until=tuple(busy) if known else (),
                nodes_up=row.nodes_ready if growing else None,
                resized_at=row.updated_at if growing else None,
            )
        )
    return out
