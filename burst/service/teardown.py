"""Teardown and metering, the end of a pool's life: delete a pool in the cloud, post its charges to
the ledger, then mark it deleted (each step safe to repeat, so a pass killed between any two leaves a
`deleting` row the next pass finishes); and orphans both ways: pools in a cloud with our owner tag
but no row are deleted after a grace period, rows whose cloud pool is gone are closed, metered, and
their workloads requeued."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from burst import failpoints
from burst.amounts import Money
from burst.clock import Clock
from burst.cloud.provider import ProviderError
from burst.cloud.provision import Provisioner, gone_at, look, record_instances
from burst.config import Config
from burst.kube.replicate import KubeObjects
from burst.kube.sync import Syncer
from burst.model import Cloud
from burst.money import ledger
from burst.money.meter import PoolHistory, Use, meter
from burst.service.remote import CLUSTER_ERRORS
from burst.store.tables import BudgetReservation, Pool, PoolEvent, PoolInstance, Workload
from burst.store.tables import Dispatch as DispatchRow

HOUR = timedelta(hours=1)
log = logging.getLogger(__name__)
ACTIVE = ("planned", "dispatched")
LIVE_STATES = ("creating", "ready", "resizing", "draining")


class Teardown:
    def __init__(
        self,
        *,
        config: Config,
        clock: Clock,
        sessions: sessionmaker[Session],
        local: KubeObjects,
        provisioner: Provisioner,
        syncer: Syncer,
    ) -> None:
        assert config.service is not None
        self.config, self.service = config, config.service.spec
        self.targets = {t.name: t for t in self.service.targets}
        self.clock, self.sessions, self.local = clock, sessions, local
        self.provisioner, self.syncer = provisioner, syncer
        self.idle_since: dict[str, datetime] = {}  # ready pools with nothing on them, since when
        self._orphans_seen: dict[str, datetime] = {}
        self._metered_to: datetime | None = None  # the hour up to which live pools are charged

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
                        # Its instances as listed: a pool deleted out of band later is billed
                        # with those replaced since its last look, up to this one.
                        record_instances(s, row, in_cloud[name].instances)
                        continue
                    first = self._orphans_seen.setdefault(name, now)
                    if now - first >= grace:
                        try:
                            provider.delete_pool(name)
                        except ProviderError as exc:  # this one waits; the others go on
                            log.warning("orphan pool %s/%s: %s", target, name, exc.message)
                            continue
                        self._orphans_seen.pop(name, None)
                        done.append(f"deleted orphan pool {target}/{name}")
                        if row is not None and row.state == "failed":
                            # A failed launch whose deletion was refused billed until now.
                            row.deleted_at = now
                            self.meter_pool(s, row)
                for row in [
                    r
                    for r in rows.values()
                    if r.target == target and r.state in ("ready", "resizing", "creating")
                ]:
                    if row.name not in in_cloud:
                        done.append(f"pool {row.name} vanished from {target}")
                        self._lost_pool(s, row)
            s.commit()
        return done

    def _lost_pool(self, s: Session, row: Pool) -> None:
        """A pool gone from its cloud behind burst's back: closed and billed to its instances'
        ends, its work requeued. Where the cloud will not give those ends now, it is closed as a
        deletion under way, which each pass asks again."""
        row.deleted_at = gone_at(self.provisioner, s, row)
        row.state_reason = "gone from the cloud"
        if row.deleted_at is not None:
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
                self.syncer.requeue(obj, f"pool {row.name} was lost")
            d.state, w.state, w.state_reason = "cancelled", "requeued", f"pool {row.name} was lost"
            d.updated_at = row.deleted_at or self.clock.now()  # it used the pool until then
        s.commit()
        if row.deleted_at is None:
            # Left as a deletion under way, which the next pass finishes: asked again now, the
            # throttled cloud would be asked twice more, each ask retried with back-off.
            self.provisioner.mark_deleting(s, row, "gone from the cloud")

    # -- teardown and metering --

    def delete_pool(self, s: Session, name: str, reason: str) -> None:
        """Delete in the cloud, post the pool's charges, then mark it deleted: each step is safe to
        repeat, so a pass killed between any two leaves a `deleting` row the next pass finishes."""
        row = self.provisioner.delete(s, name, reason)
        if row is not None:
            self.idle_since.pop(name, None)
            self.meter_pool(s, row)
            failpoints.hit("pool-metered")
            self.provisioner.mark_deleted(s, row)

    def meter_live(self, s: Session) -> None:
        """Charge the closed hours of every pool still running, once per hour that closes (in
        the first pass after it, and in a new process's first pass), and let go the
        reservations whose dispatch has ended and whose hours are all charged."""
        hour = self.clock.now().replace(minute=0, second=0, microsecond=0)
        if self._metered_to != hour:
            # Failed pools too, whose billing tail may still be open (metered when they failed,
            # unless the process died first).
            for row in s.scalars(
                select(Pool).where(
                    Pool.state.in_(LIVE_STATES)
                    | ((Pool.state == "failed") & (Pool.deleted_at >= hour - 2 * HOUR))
                )
            ).all():
                look(self.provisioner, s, row)  # instances replaced since the last look
                self.meter_pool(s, row)
            self._metered_to = hour
        held = s.execute(
            select(BudgetReservation.id, BudgetReservation.workload_id, BudgetReservation.pool_id, Pool.state)
            .outerjoin(Pool, Pool.id == BudgetReservation.pool_id)
            .where(BudgetReservation.state == "held")
        ).all()  # fmt: skip
        if not held:
            return
        # Per (workload, pool): its dispatches, how many still active, the last one's end.
        ends = {
            (workload, pool): (active, last)
            for workload, pool, active, last in s.execute(
                select(
                    DispatchRow.workload_id,
                    DispatchRow.pool_id,
                    func.sum(case((DispatchRow.state.in_(ACTIVE), 1), else_=0)),
                    func.max(DispatchRow.updated_at),
                )
                .where(
                    DispatchRow.workload_id.in_(
                        select(BudgetReservation.workload_id).where(
                            BudgetReservation.state == "held"
                        )
                    )
                )
                .group_by(DispatchRow.workload_id, DispatchRow.pool_id)
            )
        }
        done = []
        for rid, workload, pool, state in held:
            active, last = ends.get((workload, pool), (1, None))
            if state is None or state in ("deleted", "failed"):
                done.append(rid)  # metered to the end when it went
            elif not active and last is not None and last < hour:
                done.append(rid)  # every attempt there ended before the hour now charged
        if done:
            ledger.release(s, done, self.clock)
            s.commit()

    def meter_pool(self, s: Session, row: Pool) -> int:
        """Post the pool's closed hours (all of them once it is deleted). Every dispatch that
        reached the pool is charged for the time it held GPUs there, whatever became of it
        (finished, deleted by its user, lost with the pool); one still running, to now."""
        events = list(
            s.scalars(select(PoolEvent).where(PoolEvent.pool_id == row.id).order_by(PoolEvent.at))
        )
        # A resize's nodes are launched when it is asked, not when the pool is ready again.
        changes = tuple(
            (e.at, e.nodes) for e in events if e.to_state in ("creating", "ready", "resizing")
        )
        seen = s.execute(
            select(PoolInstance.launched, PoolInstance.ended).where(PoolInstance.pool_id == row.id)
        ).all()
        uses = []
        workloads: dict[str, Workload] = {}
        for d in s.scalars(
            select(DispatchRow).where(
                DispatchRow.pool_id == row.id, DispatchRow.remote_namespace != ""
            )
        ):
            w = s.get(Workload, d.workload_id)
            if w is not None:
                workloads[w.uid] = w
                end = None if d.state in ACTIVE else d.updated_at
                uses.append(Use(w.uid, w.team, w.gpus_per_pod * w.pods, d.created_at, end))
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
            instances=tuple((launched, ended) for launched, ended in seen) if seen else None,
        )
        # A deleted pool's last hours close after its billing tail; a live one's at `now`.
        until = row.deleted_at + timedelta(hours=2) if row.deleted_at else self.clock.now()
        charges = meter(history, uses, until)
        if not charges:
            return 0
        target = self.targets[row.target]
        context = ledger.ChargeContext(
            row.id,
            row.policy,
            target.cloud,
            row.region,
            namespaces={uid: w.namespace for uid, w in workloads.items()},
            workload_ids={uid: w.id for uid, w in workloads.items()},
            workload_names={uid: f"{w.namespace}/{w.name}" for uid, w in workloads.items()},
            policies={uid: w.policy for uid, w in workloads.items() if w.policy},
            instance_type=row.instance_type,
            capacity=row.capacity,
            zone=row.zone,
            account=target.account,
        )
        posted = ledger.post(s, charges, context, self.clock)
        s.commit()
        if not posted:
            return 0
        for use in uses:  # the jobs show what they cost
            w = s.scalar(select(Workload).where(Workload.uid == use.workload))
            micros = ledger.workload_cost(s, use.workload).get("USD")
            if w is None or micros is None:
                continue
            cost = {f"{self.service.label_prefix}cost": str(Money(micros, "USD"))}
            try:
                self.local.patch(w.kind, w.namespace, w.name, {"metadata": {"annotations": cost}})
            except CLUSTER_ERRORS as exc:
                # Its cost is in the ledger; a job deleted since (by its user, by its TTL) has
                # nowhere to show it; one the cluster cannot reach now shows it at the next posting.
                if getattr(exc, "status", None) != 404:
                    log.warning("cost of %s/%s not shown on it: %s", w.namespace, w.name, exc)
        return posted
