"""The reconcile loop's remote steps against a strict on-prem sandbox and a remote one: errors stay
with their workload or target, copies that vanish or get stuck are requeued, a requeued workload
gets a new copy, and what no active dispatch backs is collected."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from burst import config
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.kube.copies import CopyKey, RemoteCopies
from burst.kube.events import EventRecorder
from burst.kube.replicate import KubeObjects, Replicator
from burst.kube.sync import RemoteHealth, Syncer
from burst.service.remote import STUCK_PENDING, Outcomes, RemoteSteps
from burst.store import database
from burst.store.tables import Dispatch, Pool, Workload
from tests.conftest import ROOT, wait_for
from tests.integration.test_replicate_sync import (
    POOL,
    pool_node,
    remote,
    remote_cluster,
    setup_local,
    template,
)

__all__ = ["remote", "remote_cluster"]  # fixtures shared with test_replicate_sync
SHIPPED = catalog.shipped()
CFG = config.load(
    [ROOT / "burst" / "data" / "demo" / "config.yaml"],
    config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()),
)
TARGET = "sim-azure"  # its remote namespace is burst-{namespace}


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    yield database.sessions(engine)
    engine.dispose()


def steps(kube: Any, remotes: dict[str, KubeObjects], clock: FakeClock) -> RemoteSteps:
    local = KubeObjects(kube)
    events = EventRecorder(kube, clock)
    return RemoteSteps(
        config=CFG,
        clock=clock,
        local=local,
        remotes=remotes,
        replicator=Replicator(local, events, "burst-demo"),
        syncer=Syncer(local, events, clock, "burst-demo"),
        health=RemoteHealth(clock, grace=timedelta(minutes=10)),
    )


def planned(
    kube: Any,
    s: Session,
    name: str,
    clock: FakeClock,
    gpus: int = 2,
    namespace: str = "cms-ml",
    runs: str = "0.3s",
    capacity: str = "on-demand",
    exit_code: int = 0,
    restart: str = "Never",
) -> Dispatch:
    """A burstable Job on-prem, whose pods run for `runs` in the sandbox and end with
    `exit_code` under `restart`, and its planned dispatch onto a ready pool of `capacity`."""
    pods = template()
    pods["spec"]["restartPolicy"] = restart
    pods["metadata"]["annotations"]["sandbox.burst.dev/duration"] = runs
    pods["metadata"]["annotations"]["sandbox.burst.dev/exit-code"] = str(exit_code)
    pods["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    client.BatchV1Api(kube).create_namespaced_job(
        namespace,
        {
            "metadata": {"name": name, "labels": {"burst.dev/burstable": "true"}},
            "spec": {"template": pods},
        },
    )
    job = client.BatchV1Api(kube).read_namespaced_job(name, namespace)
    now = clock.now()
    pool = s.query(Pool).filter_by(name=POOL).one_or_none() or Pool(
        name=POOL,
        token="t",
        target=TARGET,
        provider="azure",
        region="eastus",
        instance_type="Standard_NC4as_T4_v3",
        capacity=capacity,
        accelerator="V100",
        gpus_per_node=8,
        nodes_desired=1,
        policy="demo-training",
        state="ready",
        unit_price_micros=3_000_000,
        currency="USD",
        price_source="catalog",
        epoch=1,
        created_at=now,
        updated_at=now,
    )
    w = Workload(
        uid=job.metadata.uid,
        kind="Job",
        namespace=namespace,
        name=name,
        team=namespace,
        policy="demo-training",
        state="planned",
        gpus_per_pod=2,
        created_at=now,
        updated_at=now,
    )
    s.add_all([pool, w])
    s.flush()
    d = Dispatch(
        workload_id=w.id,
        pool_id=pool.id,
        attempt=1,
        target=TARGET,
        remote_namespace="",
        remote_name=f"planned-{w.uid}-1",
        state="planned",
        epoch=1,
        created_at=now,
        updated_at=now,
    )
    s.add(d)
    s.commit()
    return d


def test_one_workloads_refusal_does_not_stop_the_others(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """One error (403, 422, an unreachable cluster) aborted the whole pass for every workload.
    Now it fails that dispatch alone: here the copy's namespace is Terminating on the remote
    cluster (403), and the other workload goes; an unreachable target fails both, and neither
    crashes the pass."""
    setup_local(kube)
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": "atlas-ml"}})
    clock = FakeClock()
    remote.ensure_namespace("burst-cms-ml")
    remote.core.create_namespaced_config_map(
        "burst-cms-ml", {"metadata": {"name": "held", "finalizers": ["example.org/keep"]}}
    )
    remote.core.delete_namespace("burst-cms-ml")
    with sessions() as s:
        planned(kube, s, "first", clock)
        planned(kube, s, "second", clock, namespace="atlas-ml")
    unreachable = KubeObjects(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    out = Outcomes()
    with sessions() as s:
        steps(kube, {TARGET: unreachable}, clock).dispatch_ready(s, out)
        assert out.dispatched == []
        assert {d.state for d in s.query(Dispatch)} == {"planned"}
    with sessions() as s:
        steps(kube, {TARGET: remote}, clock).dispatch_ready(s, out)
        assert out.dispatched == ["atlas-ml/second"]  # first: 403, it waits for the next pass
        assert {d.state for d in s.query(Dispatch)} == {"planned", "dispatched"}


@pytest.mark.parametrize("mirrored", [False, True], ids=["listed", "mirrored"])
def test_a_vanished_copy_is_requeued_and_a_stuck_one_deleted_then_requeued(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session], mirrored: bool
) -> None:
    """A copy deleted behind burst's back (or by its own TTL) left the local job suspended and the
    pool billing for ever; a copy that never leaves Pending did the same. The same whether the
    copies are listed each pass or kept by a watch, as `burst serve` keeps them."""
    setup_local(kube)
    clock = FakeClock()
    with sessions() as s:
        planned(kube, s, "vanishing", clock)
        planned(kube, s, "stuck", clock, gpus=16)  # more than the pool's node has: Pending
    remote_steps = steps(kube, {TARGET: remote}, clock)
    mirror = RemoteCopies(remote, "burst-demo", watch_timeout=5)
    if mirrored:
        remote_steps.mirrors = {TARGET: mirror}
    out = Outcomes()
    with sessions() as s:
        remote_steps.dispatch_ready(s, out)
        names = {d.workload_id: d.remote_name for d in s.query(Dispatch)}
    vanishing = next(n for n in names.values() if n.startswith("vanishing"))
    wait_for(lambda: mirror.snapshot(["Job"]) and len(mirror.snapshot(["Job"]) or {}) == 2)
    remote.delete("Job", "burst-cms-ml", vanishing)
    wait_for(lambda: len(mirror.snapshot(["Job"]) or {}) == 1)  # the watch saw it go
    with sessions() as s:
        remote_steps.follow(s, out)
    assert out.requeued == ["cms-ml/vanishing"]
    local = KubeObjects(kube)
    assert local.read("Job", "cms-ml", "vanishing")["spec"]["suspend"] is False  # type: ignore[index]
    clock.advance(STUCK_PENDING + timedelta(minutes=1))
    with sessions() as s:
        remote_steps.follow(s, out)
        states = {w.name: w.state for w in s.query(Workload)}
    assert out.requeued == ["cms-ml/vanishing", "cms-ml/stuck"]
    assert states == {"vanishing": "requeued", "stuck": "requeued"}
    stuck = next(n for n in names.values() if n.startswith("stuck"))
    assert remote.read("Job", "burst-cms-ml", stuck) is None  # gone before the job resumed
    reasons = [e.message for e in client.CoreV1Api(kube).list_namespaced_event("cms-ml").items]
    assert any("vanished" in r for r in reasons) and any("sat Pending" in r for r in reasons)
    mirror.stop()


@dataclass
class RunningCopy:
    """One burstable job of an hour dispatched to the pool's node and seen running there."""

    remote: KubeObjects
    sessions: sessionmaker[Session]
    clock: FakeClock
    steps: RemoteSteps
    name: str = ""
    out: Outcomes = field(default_factory=Outcomes)

    def status(self) -> dict[str, Any]:
        return dict((self.remote.read("Job", "burst-cms-ml", self.name) or {}).get("status") or {})

    def ready(self) -> int:
        return int(self.status().get("ready") or 0)

    def follow(self) -> None:
        with self.sessions() as s:
            self.steps.follow(s, self.out)

    def reclaim(self) -> None:
        """The node goes, and its copy is seen Pending again (the Job's next pod)."""
        self.remote.core.delete_node("pool-node-1")
        wait_for(lambda: self.ready() == 0 and self.status().get("active"))
        self.follow()

    def workload(self) -> Workload:
        with self.sessions() as s:
            (row,) = s.query(Workload)
            return row


def running_copy(
    kube: Any,
    remote: KubeObjects,
    sessions: sessionmaker[Session],
    capacity: str,
    runs: str = "1h",
    exit_code: int = 0,
    restart: str = "Never",
) -> RunningCopy:
    setup_local(kube)
    clock = FakeClock()
    with sessions() as s:
        planned(
            kube,
            s,
            "reclaimed",
            clock,
            runs=runs,
            capacity=capacity,
            exit_code=exit_code,
            restart=restart,
        )
    copy = RunningCopy(remote, sessions, clock, steps(kube, {TARGET: remote}, clock))
    with sessions() as s:
        copy.steps.dispatch_ready(s, copy.out)
        (copy.name,) = [d.remote_name for d in s.query(Dispatch)]
    wait_for(lambda: copy.ready() == 1)
    copy.follow()  # seen running
    return copy


def test_a_copy_that_lost_its_node_and_stays_pending_is_requeued(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """A copy seen running was never taken for stuck: when its node went and no other came, its
    Job made a new pod that stayed Pending, and the workload waited on that for ever. Node gone,
    pod failed (kube-controller-manager's pod GC fails the pods of a deleted node), the Job's next
    pod unschedulable: once Pending past STUCK_PENDING since, it is requeued; a copy that runs
    again in time is left alone. (On demand; a spot copy goes at once, below.)"""
    copy = running_copy(kube, remote, sessions, "on-demand")
    copy.clock.advance(timedelta(minutes=40))
    copy.reclaim()
    # A replacement comes within the limit: the next pod runs there, and nothing is requeued.
    copy.clock.advance(timedelta(minutes=20))
    remote.core.create_node(pool_node())
    wait_for(lambda: copy.ready() == 1)
    assert not copy.status().get("failed")  # a disruption: not counted against its backoffLimit
    copy.follow()
    copy.clock.advance(STUCK_PENDING)
    copy.follow()
    assert copy.out.requeued == []
    copy.reclaim()  # and again, with no replacement this time
    copy.clock.advance(STUCK_PENDING - timedelta(minutes=1))
    copy.follow()
    assert copy.out.requeued == []
    copy.clock.advance(timedelta(minutes=2))
    copy.follow()
    assert copy.out.requeued == ["cms-ml/reclaimed"] and copy.workload().state == "requeued"
    assert remote.read("Job", "burst-cms-ml", copy.name) is None  # gone before the job resumed


def test_a_copys_run_is_dated_from_when_it_is_seen_running_again_after_a_lost_node(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """The plan expects a copy to end a runtime after its run started (service/loop.py), which it
    dated from the dispatch: onto a launching pool the launch too early, and after a lost node
    the whole run lost. The follow step records when a copy is first seen running, forgets it
    while the copy is Pending again, and records the next run's start."""

    def started() -> datetime | None:
        with sessions() as s:
            return s.scalar(select(Dispatch.started_at))

    copy = running_copy(kube, remote, sessions, "on-demand")
    assert started() == copy.clock.now()
    copy.clock.advance(timedelta(minutes=40))
    copy.follow()  # still running: its start stays
    assert started() == copy.clock.now() - timedelta(minutes=40)
    copy.reclaim()
    assert started() is None
    copy.clock.advance(timedelta(minutes=20))
    remote.core.create_node(pool_node())
    wait_for(lambda: copy.ready() == 1)
    copy.follow()
    assert started() == copy.clock.now()


def test_a_copy_whose_spot_node_is_reclaimed_is_requeued_at_once(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """On spot, the Job's next pod would run again from scratch on the node that replaces the one
    reclaimed, and again after the next reclaim: a run longer than spot lets a node live never
    ended (the replay's 200-hour run lost nineteen times). A copy Pending again after it ran on a
    spot pool goes back to the decision at once, which offers it no spot again."""
    copy = running_copy(kube, remote, sessions, "spot")
    copy.reclaim()
    row = copy.workload()
    assert copy.out.requeued == ["cms-ml/reclaimed"] and row.state == "requeued"
    assert "spot node was reclaimed" in (row.state_reason or "")
    assert remote.read("Job", "burst-cms-ml", copy.name) is None  # gone before the job resumed


def test_a_copy_whose_own_pod_failed_on_spot_is_not_taken_for_reclaimed(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """A Job's pod that exits in error is counted in its status.failed, and its controller waits
    out the pod-failure backoff (10 s, doubling to 10 minutes: pkg/controller/job
    DefaultJobPodFailureBackOff) with no pod ready before it makes the next: Pending again after
    it ran, as after a reclaim, whose pod the copy's Ignore rule leaves uncounted. Requeued as
    reclaimed, the job's backoffLimit started again on the next attempt, and under a spot-only
    policy a job that always fails went out again for ever. (The node is cordoned here to hold
    the Pending spell still: the test cluster's backoff is shortened to a tenth of a second.)"""
    copy = running_copy(kube, remote, sessions, "spot", runs="2s", exit_code=1)
    remote.core.patch_node("pool-node-1", {"spec": {"unschedulable": True}})
    wait_for(lambda: copy.status().get("failed") and not copy.ready(), timeout=15)
    copy.follow()
    assert copy.out.requeued == [] and copy.workload().state == "dispatched"
    with sessions() as s:
        (dispatch,) = s.query(Dispatch)
        assert dispatch.state_reason is None  # not a lost node: stuck only past STUCK_PENDING
    # Its next pod runs once the node takes pods again: still its first attempt.
    remote.core.patch_node("pool-node-1", {"spec": {"unschedulable": False}})
    wait_for(lambda: copy.ready() == 1, timeout=15)
    copy.follow()
    assert copy.out.requeued == []


def test_a_copy_reclaimed_after_a_failure_of_its_own_is_requeued_at_once(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """status.failed only grows: once a copy's own pod had exited in error, every later reclaim of
    its spot node was taken for another failure of its own and left to STUCK_PENDING, its run
    starting again from scratch on whatever spot node came. What tells them apart is a failure
    counted since the copy was last seen running."""
    copy = running_copy(kube, remote, sessions, "spot")
    (pod,) = remote.core.list_namespaced_pod("burst-cms-ml").items
    remote.core.patch_node("pool-node-1", {"spec": {"unschedulable": True}})  # its next pod waits
    ended = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2026-01-01T00:00:00Z"}}
    remote.core.patch_namespaced_pod_status(  # its container crashes, as its kubelet reports
        pod.metadata.name,
        "burst-cms-ml",
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {**pod.status.container_statuses[0].to_dict(), "state": ended}
                ],
            }
        },
    )
    wait_for(lambda: copy.status().get("failed") == 1 and not copy.ready(), timeout=15)
    copy.follow()
    assert copy.out.requeued == []  # its own failure: the Job makes its next pod
    remote.core.patch_node("pool-node-1", {"spec": {"unschedulable": False}})
    wait_for(lambda: copy.ready() == 1, timeout=15)
    copy.follow()  # running again
    copy.reclaim()
    assert copy.out.requeued == ["cms-ml/reclaimed"]
    assert "spot node was reclaimed" in (copy.workload().state_reason or "")


def test_a_job_copy_whose_container_crash_loops_on_spot_is_not_taken_for_reclaimed(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """Under restartPolicy OnFailure the kubelet restarts a crashing container in place, and in
    its CrashLoopBackOff the pod is Running but not ready: the copy shows no pod ready, as after
    a reclaim, but counts no failed pod. Taken for reclaimed, the copy was withdrawn and the job
    sent again, its backoffLimit starting anew. A reclaim's lost pod is counted (such a copy can
    carry no rule to ignore it): that one goes at once."""
    copy = running_copy(kube, remote, sessions, "spot", runs="1s", exit_code=1, restart="OnFailure")
    wait_for(lambda: not copy.ready() and copy.status().get("active"), timeout=15)
    assert not copy.status().get("failed")
    copy.follow()
    assert copy.out.requeued == [] and copy.workload().state == "dispatched"
    wait_for(lambda: copy.ready() == 1, timeout=30)  # restarted once its back-off is over
    copy.follow()
    copy.reclaim()
    assert copy.out.requeued == ["cms-ml/reclaimed"]


class _Behind:
    """A mirror one event behind its cluster: it has not seen the copy made a moment ago."""

    def snapshot(self, kinds: object) -> dict[CopyKey, Any]:
        return {}


def test_a_copy_a_list_or_mirror_lacks_is_read_before_it_is_called_missing(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """A watch lags its cluster: a copy created this pass may not be in it yet. Called missing,
    the workload would be requeued on-prem while its copy starts in the cloud."""
    setup_local(kube)
    clock = FakeClock()
    with sessions() as s:
        planned(kube, s, "fresh", clock, runs="1h")  # still running when followed, however slow
    remote_steps = steps(kube, {TARGET: remote}, clock)
    remote_steps.mirrors = {TARGET: _Behind()}  # type: ignore[dict-item]
    out = Outcomes()
    with sessions() as s:
        remote_steps.dispatch_ready(s, out)
        remote_steps.follow(s, out)
        (row,) = s.query(Workload)
    assert out.requeued == [] and row.state == "dispatched"


def test_a_requeued_workloads_next_attempt_is_a_new_copy_and_stale_ones_are_collected(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """A requeued job's stale copy was found by name and reused, pinned to a pool that no longer
    existed; copied Secrets stayed for ever. Attempts name their copies; `collect` removes what no
    active dispatch backs, Secrets included."""
    setup_local(kube)
    clock = FakeClock()
    with sessions() as s:
        first = planned(kube, s, "again", clock)
    remote_steps = steps(kube, {TARGET: remote}, clock)
    with sessions() as s:
        remote_steps.dispatch_ready(s, Outcomes())
        d = s.get(Dispatch, first.id)
        assert d is not None and d.state == "dispatched"
        stale = d.remote_name
        d.state = "cancelled"  # its pool was lost: requeued
        s.add(
            Dispatch(
                workload_id=d.workload_id,
                pool_id=d.pool_id,
                attempt=2,
                target=TARGET,
                remote_namespace="",
                remote_name="planned-again-2",
                state="planned",
                epoch=1,
                created_at=clock.now(),
                updated_at=clock.now(),
            )
        )
        s.commit()
        client.BatchV1Api(kube).patch_namespaced_job(
            "again", "cms-ml", {"spec": {"suspend": False}}
        )
    with sessions() as s:
        out = Outcomes()
        remote_steps.dispatch_ready(s, out)
        second = s.query(Dispatch).filter_by(attempt=2).one()
        assert out.dispatched == ["cms-ml/again"] and second.remote_name == f"{stale}-r2"
    assert remote.read("Secret", "burst-cms-ml", "wandb-api-key") is not None
    assert remote_steps.collect(sessions) == [f"removed {TARGET}/burst-cms-ml/{stale}"]
    with sessions() as s:
        s.query(Dispatch).filter_by(attempt=2).one().state = "done"
        s.commit()
    gone = remote_steps.collect(sessions)
    assert f"removed {TARGET}/Secret burst-cms-ml/wandb-api-key" in gone
    assert remote.read("Secret", "burst-cms-ml", "wandb-api-key") is None


def test_targets_that_share_a_cluster_never_collect_each_others_copies(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """Each target collected what no dispatch of its own backed: with two targets on one cluster,
    one removed the other's running copy and copied Secrets (seen in the soak)."""
    setup_local(kube)
    clock = FakeClock()
    with sessions() as s:
        planned(kube, s, "shared", clock)
    remote_steps = steps(kube, {TARGET: remote, "sim-aws": remote}, clock)
    with sessions() as s:
        out = Outcomes()
        remote_steps.dispatch_ready(s, out)
        assert out.dispatched == ["cms-ml/shared"]
    assert remote_steps.collect(sessions) == []
    assert remote.read("Secret", "burst-cms-ml", "wandb-api-key") is not None


def test_a_target_silent_past_its_grace_has_its_workloads_requeued(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    setup_local(kube)
    clock = FakeClock()
    with sessions() as s:
        planned(kube, s, "far", clock)
    with sessions() as s:
        steps(kube, {TARGET: remote}, clock).dispatch_ready(s, Outcomes())
    silent = steps(
        kube,
        {TARGET: KubeObjects(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))},
        clock,
    )
    out = Outcomes()
    with sessions() as s:
        silent.follow(s, out)  # first silence: noted
        clock.advance(timedelta(minutes=11))
        silent.follow(s, out)  # still silent past the grace: lost
        silent.requeue_gone(s, out)
        assert out.requeued == []  # its pool's nodes may still run the copy: not yet
        s.scalars(select(Pool)).one().state = "deleted"  # as the loop has the cloud do
        s.commit()
        silent.requeue_gone(s, out)
    assert out.requeued == ["cms-ml/far"]


def test_a_copy_whose_pool_was_deleted_is_requeued_when_its_cluster_answers_again(
    kube: Any, remote: KubeObjects, sessions: sessionmaker[Session]
) -> None:
    """Its cluster went silent past its grace and the cloud deleted its pool; then the cluster
    answered again before the original resumed. Its copy had no node left to run on, yet was
    followed as if alive, and the original stayed suspended for ever."""
    setup_local(kube)
    clock = FakeClock()
    with sessions() as s:
        planned(kube, s, "far", clock)
    answering = steps(kube, {TARGET: remote}, clock)
    out = Outcomes()
    with sessions() as s:
        answering.dispatch_ready(s, Outcomes())
        s.scalars(select(Pool)).one().state = "deleted"
        s.commit()
        answering.follow(s, out)
        assert s.scalars(select(Workload)).one().state_reason == (
            "its pool aws-euc1-p3-8xlarge-od-1 was deleted"
        )
    assert out.requeued == ["cms-ml/far"]
