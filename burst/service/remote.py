"""The reconcile loop's steps that talk to the remote clusters: replicate each planned dispatch
once its pool is ready, follow each dispatched copy to its outcome, and collect what no active
dispatch backs. Each workload and each target stands alone: a refusal (403, 422) or an unreachable
cluster fails that one and is logged, never the pass; a target that has not answered for its grace
period has its workloads requeued on-prem.

A copy that vanished without an outcome, Pending again after its spot node was reclaimed (with no
failed pod of its own counted: one that has is waiting out its Job's backoff), or Pending past
STUCK_PENDING (never started, or again since its node went) is requeued too, for the
plan to send again; a copy still there is deleted first (were it to start after the local job
resumed, the job would run twice). `collect` removes a requeued workload's copies and the Secrets
and ConfigMaps burst copied, on the orphan-GC schedule.

Cost: the rows come in a few queries for all workloads, the copies from a watch (or one list) per
cluster; only workloads that change are written, together, each in a savepoint.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from burst import failpoints
from burst.amounts import Money
from burst.clock import Clock
from burst.config import Config
from burst.kube.copies import CopyKey, RemoteCopies
from burst.kube.replicate import DispatchResult, KubeObjects, Replicator
from burst.kube.sync import RemoteHealth, Syncer
from burst.kube.translate import remote_name
from burst.money import ledger
from burst.service.dispatches import Followed, followed, joined, load
from burst.store.tables import Dispatch as DispatchRow
from burst.store.tables import Pool, Workload

log = logging.getLogger(__name__)
ACTIVE = ("planned", "dispatched")
GONE = ("deleted", "failed")  # pool states whose nodes no longer run anything
# A copy still Pending this long after it was created is not coming up (its pool is ready when
# it is sent; scheduling and an image pull take minutes, not half an hour).
STUCK_PENDING = timedelta(minutes=30)
LOST_NODE = "lost its node"  # a dispatch's state reason: its copy ran, and is Pending again
# What a cluster answers with when it refuses or cannot be reached.
UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)
CLUSTER_ERRORS = (ApiException, *UNREACHABLE)
DISPATCH_THREADS = 8  # dispatches whose API calls run at once
COMMIT_EVERY = 100  # changed workloads per commit: SQLite commits cost tens of milliseconds


@dataclass
class Outcomes:
    """What the remote steps did in one pass, by workload (namespace/name)."""

    dispatched: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)


class ClusterSteps:
    """What the remote steps share: the clusters, each one's health, a dispatch's step isolated
    from the others, and the collection of what no active dispatch backs."""

    def __init__(
        self,
        *,
        config: Config,
        clock: Clock,
        local: KubeObjects,
        remotes: Mapping[str, KubeObjects],
        replicator: Replicator,
        syncer: Syncer,
        cached: Callable[[str], Mapping[str, Any] | None] = lambda uid: None,
        mirrors: Mapping[str, RemoteCopies] | None = None,
        health: RemoteHealth | None = None,
    ) -> None:
        assert config.service is not None
        self.config, self.clock, self.local, self.remotes = config, clock, local, remotes
        self.targets = {t.name: t for t in config.service.spec.targets}
        self.replicator, self.syncer = replicator, syncer
        self.cached = cached  # the on-prem watch's copy of a local object, by uid
        self.mirrors = dict(mirrors or {})  # each target's copies kept by a watch, if any
        self.health = health or RemoteHealth(clock)
        self._changes = 0  # workloads changed since the last commit

    def _local(self, w: Workload | Followed) -> Mapping[str, Any] | None:
        """The local object from the watch cache; read only if the cache lacks it (deleted, or
        not seen yet), so that a deletion is confirmed by the API server itself."""
        found = self.cached(w.uid)
        return found if found is not None else self.local.read(w.kind, w.namespace, w.name)

    # -- replicate --

    def _isolated(
        self,
        s: Session,
        d: DispatchRow | Followed,
        step: str,
        work: Any,
        nested: bool = True,
        asks: bool = True,
    ) -> None:
        """One dispatch's step in a savepoint: a cluster's refusal or silence fails it alone.
        Its changes are committed with others (every COMMIT_EVERY, and at the end of the step's
        loop): each step acts in the clusters before it records, so a pass that dies before the
        commit leaves work the next pass finds done and records. A step that records only after
        all its cluster calls returned (`nested=False`) has nothing to undo and needs no
        savepoint (each one flushes the session: a thousand of them took seconds). A step that
        `asks` the dispatch's cluster and succeeds shows the cluster answers; one that does not
        ask it (requeueing the jobs of a cluster that stopped answering) shows nothing."""
        try:
            with s.begin_nested() if nested else contextlib.nullcontext():
                work()
        except CLUSTER_ERRORS as exc:
            self._failed(d.target, exc)
            why = getattr(exc, "reason", None) or exc.__class__.__name__
            log.warning("%s of dispatch %d on %s failed: %s", step, d.id, d.target, why)
        else:
            if asks:
                self.health.ok(d.target)
        if self._changes >= COMMIT_EVERY:
            s.commit()
            self._changes = 0

    def _failed(self, target: str, exc: BaseException) -> None:
        """An unreachable or unavailable cluster counts against its grace; a refusal does not."""
        if isinstance(exc, UNREACHABLE) or getattr(exc, "status", 0) in (0, 502, 503, 504):
            self.health.failed(target)

    def silent(self) -> tuple[str, ...]:
        """The targets whose cluster does not answer now, for the plan to leave out; one asked
        nothing since the last call (it runs no copy) is asked here, or it stays silent for ever."""
        for target in sorted(self.targets):
            if self.health.failing(target) and target not in self.health.asked:
                self._copies({(target, "Job")})  # heard from, or failed again
        self.health.asked.clear()
        return tuple(t for t in sorted(self.targets) if self.health.failing(t))

    def _copies(self, wanted: set[tuple[str, str]]) -> dict[str, dict[CopyKey, Any]]:
        """Each target's copies, listed once; a target that does not answer is left out of this
        pass (and counted against its grace period)."""
        out = {}
        for target in sorted({t for t, _ in wanted}):
            kinds = {k for t, k in wanted if t == target}
            mirror = self.mirrors.get(target)
            mirrored = mirror.snapshot(kinds) if mirror is not None else None
            if mirrored is not None:
                out[target] = mirrored
                self.health.ok(target)
                continue
            try:  # no mirror, or not connected: list (a cluster that does not answer fails)
                out[target] = self.syncer.copies(self.remotes[target], kinds)
            except CLUSTER_ERRORS as exc:
                self._failed(target, exc)
                log.warning(
                    "listing copies on %s failed: %s",
                    target,
                    getattr(exc, "reason", None) or exc.__class__.__name__,
                    extra={"target": target},
                )
            else:
                self.health.ok(target)
        return out

    # -- collect --

    def collect(self, sessions: sessionmaker[Session]) -> list[str]:
        """Remove from every remote cluster what no active dispatch backs; a target that does not
        answer is skipped until the next round."""
        with sessions() as s:
            active: dict[str, set[tuple[str, str]]] = {t: set() for t in self.remotes}
            for d in s.scalars(select(DispatchRow).where(DispatchRow.state.in_(ACTIVE))):
                if d.state == "planned":  # its copy may exist already (a pass died after it)
                    w = s.get(Workload, d.workload_id)
                    assert w is not None
                    mapping = self.targets[d.target].remote_namespace
                    where = (
                        mapping.format(namespace=w.namespace),
                        remote_name(w.name, w.uid, d.attempt),
                    )
                else:
                    where = (d.remote_namespace, d.remote_name)
                active.setdefault(d.target, set()).add(where)
        # What any target's dispatch backs stays, wherever it is: targets may share a cluster,
        # and a copy's name (its workload's uid and attempt) is active on one target at most.
        backed = set().union(*active.values())
        done = []
        for target, remote in sorted(self.remotes.items()):
            try:
                done += [f"removed {target}/{x}" for x in self.syncer.collect_stale(remote, backed)]
            except CLUSTER_ERRORS as exc:
                log.warning("collecting on %s: %s", target, exc.__class__.__name__)
        return done


class RemoteSteps(ClusterSteps):
    """Replicate planned dispatches once their pools are ready; follow dispatched copies."""

    def dispatch_ready(self, s: Session, out: Outcomes) -> None:
        """Replicate every planned dispatch whose pool is ready; requeue those whose pool failed.
        The clusters' part of each dispatch runs in DISPATCH_THREADS threads (a thousand copies
        one after the other took minutes: each is several API calls); the records are written
        here, in order, as each one's calls return."""
        ready = []
        for d, w, pool in joined(s, "planned"):
            if pool.state in GONE:  # the pool never came, or went (its cluster lost): requeue
                d.state, w.state = "cancelled", "pending"
                w.state_reason = f"pool {pool.name} {pool.state}: {pool.state_reason}"
                self._changes += 1
            elif pool.state in ("ready", "resizing"):  # a resizing pool runs work on its nodes
                ready.append((d, w, pool))
        threads = ThreadPoolExecutor(DISPATCH_THREADS, thread_name_prefix="dispatch")
        try:
            made = self._namespaces({(d.target, self._remote_namespace(d, w)) for d, w, _ in ready})
            calls = [
                (
                    d,
                    w,
                    threads.submit(
                        self._replicate, d, w, p, (d.target, self._remote_namespace(d, w)) in made
                    ),
                )
                for d, w, p in ready
            ]
            for d, w, call in calls:
                self._isolated(
                    s,
                    d,
                    "dispatch",
                    lambda d=d, w=w, c=call: self._record(s, d, w, c, out),
                    nested=False,
                )
        finally:  # a pass that dies (a crash, a fenced commit) starts no further dispatch
            threads.shutdown(wait=True, cancel_futures=True)
        s.commit()
        self._changes = 0

    def _remote_namespace(self, d: DispatchRow, w: Workload) -> str:
        return self.targets[d.target].remote_namespace.format(namespace=w.namespace)

    def _namespaces(self, wanted: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Make sure of each remote namespace once for all of the pass's dispatches; one that
        fails is left to each dispatch, which then fails alone."""
        made = set()
        for target, namespace in sorted(wanted):
            try:
                self.remotes[target].ensure_namespace(namespace)
                made.add((target, namespace))
            except CLUSTER_ERRORS:
                pass
        return made

    def _replicate(
        self, d: DispatchRow, w: Workload, pool: Pool, namespace_made: bool
    ) -> DispatchResult | None:
        """The clusters' part of a dispatch (no database here: it runs in a thread); None if
        the local object is gone."""
        obj = self.local.read(w.kind, w.namespace, w.name)
        if obj is None:
            return None
        return self.replicator.dispatch(
            obj,
            self.remotes[d.target],
            target=d.target,
            pool=pool.name,
            remote_namespace=self._remote_namespace(d, w),
            rules=self.config.policies[w.policy or ""].spec.replication,
            attempt=d.attempt,
            namespace_made=namespace_made,
        )

    def _record(
        self,
        s: Session,
        d: DispatchRow,
        w: Workload,
        call: Future[DispatchResult | None],
        out: Outcomes,
    ) -> None:
        result = call.result()  # a cluster's error is raised here, for _isolated
        if result is None:
            d.state, w.state = "cancelled", "cancelled"
            self._changes += 1
            return
        failpoints.hit("dispatch-not-recorded")
        d.remote_namespace, d.remote_name, d.updated_at = (
            result.remote_namespace,
            result.remote_name,
            self.clock.now(),
        )
        if result.outcome == "dispatched":
            d.state, w.state = "dispatched", "dispatched"
            out.dispatched.append(f"{w.namespace}/{w.name}")
        elif result.outcome == "started-on-prem":
            d.state, w.state = "cancelled", "cancelled"
            w.state_reason = "started on-prem before its dispatch"
        else:
            d.state, w.state = "cancelled", "cancelled"
            w.state_reason = "refused: " + "; ".join(result.reasons)
            out.refused.append(f"{w.namespace}/{w.name}")
            log.warning(
                "not replicating %s/%s: %s",
                w.namespace,
                w.name,
                w.state_reason,
                extra={"workload": f"{w.namespace}/{w.name}", "reason": w.state_reason},
            )
        self._changes += 1

    # -- follow --

    def follow(self, s: Session, out: Outcomes) -> None:
        """Mirror each dispatched copy back; finish, requeue or clean up as it tells. The
        dispatches come with their workloads and pools in one query, their costs in another,
        and each cluster's copies in one list per kind."""
        rows = followed(s)
        if not rows:
            return
        costs = ledger.dispatched_costs(s)
        copies = self._copies({(f.target, f.kind) for f in rows})
        for f in rows:
            if f.pool_state in GONE:  # nothing runs its copy now: whether its cluster answers
                self._requeue_gone(s, f, out)
            elif f.target in copies:  # (a cluster that did not answer is not: see requeue_gone)
                self._isolated(
                    s,
                    f,
                    "sync",
                    lambda f=f: self._follow_one(s, f, copies[f.target], costs.get(f.uid), out),
                )
        s.commit()
        self._changes = 0

    def requeue_gone(self, s: Session, out: Outcomes) -> None:
        """The copies whose pools the cloud has deleted since the follow step (those of a
        cluster silent past its grace): their originals resume here now."""
        for f in followed(s):
            if f.pool_state in GONE:
                self._requeue_gone(s, f, out)
        s.commit()

    def _requeue_gone(self, s: Session, f: Followed, out: Outcomes) -> None:
        """A copy whose pool is gone: its original resumes here. On a cluster silent past its
        grace, only then: until the cloud has deleted its nodes the copy may still run there,
        beyond burst's reach (a throttled cloud API delays the resume, never lets both run)."""
        lost = self.health.lost(f.target)
        why = f"{f.target} stopped answering" if lost else f"its pool {f.pool} was deleted"
        self._isolated(s, f, "requeue", lambda: self._requeue(s, *load(s, f), why, out), asks=False)

    def _follow_one(
        self,
        s: Session,
        f: Followed,
        listed: Mapping[CopyKey, Any],
        micros: int | None,
        out: Outcomes,
    ) -> None:
        """One copy's state mirrored; its rows are loaded only if it changed state."""
        remote = self.remotes[f.target]
        obj = self._local(f)
        if obj is None:  # the user deleted it: the remote copy goes too
            remote.delete(f.kind, f.remote_namespace, f.remote_name)
            d, w = load(s, f)
            d.state, w.state, d.updated_at = "done", "cancelled", self.clock.now()
            self._changes += 1
            return
        update = self.syncer.sync(
            obj,
            remote,
            f.remote_namespace,
            f.remote_name,
            f"{f.target}/{f.pool}",
            Money(micros, "USD") if micros else None,
            listed=listed,
        )
        phase = update.annotations.get(f"{self.syncer.prefix}remote-phase")
        if update.finished is not None:
            d, w = load(s, f)
            d.state, w.state, d.updated_at = "done", update.finished, self.clock.now()
            out.finished.append(f"{f.namespace}/{f.name}")
            self._changes += 1
        elif phase == "missing":
            why = f"its copy {f.remote_namespace}/{f.remote_name} vanished"
            self._requeue(s, *load(s, f), why, out)
        elif phase == "running" and (
            f.state_reason != "ran" or f.failures_at_run != update.failed_pods
        ):
            d, _ = load(s, f)
            d.state_reason = "ran"  # a Pending spell from now on is one of a lost node
            d.failures_at_run = update.failed_pods  # or of its own (see below)
            if f.state_reason != "ran":  # running from now, within a sync interval
                d.started_at = self.clock.now()
            self._changes += 1
        elif phase == "pending" and f.state_reason == "ran":
            # Its own failure: a pod counted failed since it ran, where the copy ignores
            # disruptions; none, where a failing container restarts in place (there only a pod
            # taken away is counted). A PyTorchJob counts none: Pending again is a lost pod.
            more = update.failed_pods > (f.failures_at_run or 0)
            own = more != update.restarts_in_place
            if f.pool_capacity == "spot" and not own:
                # Reclaimed (pod GC fails a deleted node's pods, kubernetes pkg/controller/podgc
                # gcOrphaned): on the next spot node it would start from scratch, and be
                # reclaimed again; the decision places it again, off spot.
                self._withdraw(s, f, remote, f"its spot node was reclaimed on {f.target}", out)
                return
            # Its node went, or its own pod failed and its Job waits out the backoff; either
            # way the next pod waits, stuck if it does not start in time.
            d, _ = load(s, f)
            d.state_reason = None if own else LOST_NODE
            d.started_at = None  # its next pod starts the run again
            d.updated_at = self.clock.now()
            self._changes += 1
        elif phase == "pending" and self.clock.now() - f.updated_at > STUCK_PENDING:
            lost = "lost its node and " if f.state_reason == LOST_NODE else ""
            why = f"its copy {lost}sat Pending over {STUCK_PENDING} on {f.target}"
            self._withdraw(s, f, remote, why, out)

    def _withdraw(
        self, s: Session, f: Followed, remote: KubeObjects, why: str, out: Outcomes
    ) -> None:
        """A copy that has not finished goes, then its workload is requeued: resumed here first,
        a copy that started late would run beside it."""
        remote.delete(f.kind, f.remote_namespace, f.remote_name)
        self._requeue(s, *load(s, f), why, out)

    def stop(self, s: Session, d: DispatchRow, w: Workload, why: str, out: Outcomes) -> None:
        """Stop a running copy and requeue its workload. The copy goes first (resumed here
        first, the job could run beside it); a cluster that does not answer leaves both to the
        next pass."""

        def work() -> None:
            self.remotes[d.target].delete(w.kind, d.remote_namespace, d.remote_name)
            self._requeue(s, d, w, why, out)

        self._isolated(s, d, "stop", work)

    def _requeue(self, s: Session, d: DispatchRow, w: Workload, why: str, out: Outcomes) -> None:
        obj = self._local(w)
        if obj is not None:
            self.syncer.requeue(obj, why)
        d.state, w.state, w.state_reason = "cancelled", "requeued", why
        d.updated_at = self.clock.now()
        out.requeued.append(f"{w.namespace}/{w.name}")
        log.warning(
            "requeued %s/%s: %s",
            w.namespace,
            w.name,
            why,
            extra={"workload": f"{w.namespace}/{w.name}", "reason": why},
        )
        self._changes += 1
