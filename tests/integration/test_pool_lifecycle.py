"""Pools over their life in the running reconcile loop: a pool that has been up for longer than its
launch timeout is grown for a new job while another runs on it, and the pool survives, the job
finishes, the new one runs."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from burst import config
from burst.app import reconciler_for
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.demo.scenario import job_manifest
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects
from burst.model import OfferKey
from burst.money.meter import BILLING
from burst.sandbox import Sandbox
from burst.service.api import create_app
from burst.store import database
from burst.store.tables import Dispatch, LedgerEntry, Pool, Workload
from providers.sim import SimCloud, SimProvider, SimSettings
from tests.conftest import ROOT, wait_for
from tests.soak.world import Gate

SHIPPED = catalog.shipped()
THIRTY = timedelta(seconds=30)


def one_target_config(tmp_path: Path, capacity: str = "on-demand") -> config.Config:
    """The demo's configuration with one simulated AWS target at real speed (a 10 minute
    provisioning estimate: a 30 minute launch timeout), room for one pool, 8 h lifetimes, and
    the policy's `capacity`."""
    text = (ROOT / "burst" / "data" / "demo" / "config.yaml").read_text()
    text = text.replace("capacity: on-demand", f"capacity: {capacity}")
    text = text.replace("targets: [sim-aws, sim-gcp, sim-azure]", "targets: [sim-aws]")
    text = text.replace("maxPools: 4", "maxPools: 1").replace("maxLifetime: 10m", "maxLifetime: 8h")
    text = text.replace("provisioningEstimate: 8s", "provisioningEstimate: 10m", 1)
    (tmp_path / "config.yaml").write_text(text)
    return config.load([tmp_path], config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()))


def sessions_in(tmp_path: Path) -> tuple[Engine, sessionmaker[Session]]:
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    return engine, database.sessions(engine)


def cms_ml(kube: Any, *jobs: dict[str, Any]) -> KubeObjects:
    """The on-prem namespace with the Secret the demo's jobs read, and `jobs` created there."""
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    local.core.create_namespaced_secret(
        "cms-ml", {"metadata": {"name": "wandb-api-key"}, "stringData": {"k": "v"}}
    )
    for job in jobs:
        local.batch.create_namespaced_job("cms-ml", job, _preload_content=False)
    return local


def cloud(clock: FakeClock) -> tuple[Sandbox, KubeObjects, SimProvider]:
    """The cloud's cluster (on the same clock) and one simulated AWS target whose nodes join it,
    launching at real speed."""
    cluster = Sandbox(clock=clock, tick=0.01).start()
    remote = KubeObjects(client.ApiClient(client.Configuration(host=cluster.url)))
    provider = SimProvider(
        SimCloud(clock, settings=SimSettings()),
        target="sim-aws",
        cloud="aws",
        region="eu-central-1",
        offers=lambda: list(SHIPPED),
        kube=remote.api,
    )
    return cluster, remote, provider


def gated_cloud(
    clock: FakeClock,
) -> tuple[Sandbox, Gate, KubeObjects, SimCloud, SimProvider]:
    """As cloud(), with the way from burst to the cloud's cluster through a Gate a test can shut
    (the cloud's own way to it, by which its nodes register and go, stays open)."""
    cluster = Sandbox(clock=clock, tick=0.01).start()
    gate = Gate(int(cluster.url.rsplit(":", 1)[1]))
    remote = KubeObjects(
        client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{gate.port}"))
    )
    world = SimCloud(clock, settings=SimSettings())
    provider = SimProvider(
        world,
        target="sim-aws",
        cloud="aws",
        region="eu-central-1",
        offers=lambda: list(SHIPPED),
        kube=KubeObjects(client.ApiClient(client.Configuration(host=cluster.url))).api,
    )
    return cluster, gate, remote, world, provider


def reconciler(
    cfg: config.Config,
    clock: FakeClock,
    sessions: sessionmaker[Session],
    observer: Observer,
    kube: Any,
    remote: Any,
    provider: SimProvider,
) -> Any:
    """The reconcile loop as `burst serve` wires it, with the one target's cluster and cloud."""
    return reconciler_for(
        cfg, SHIPPED, clock, sessions, observer, kube, {"sim-aws": remote}, {"sim-aws": provider}
    )


def states(sessions: sessionmaker[Session]) -> dict[str, str]:
    """Each workload's state in the database, by name."""
    with sessions() as s:
        return {w.name: w.state for w in s.scalars(select(Workload))}


def passes_until(
    loop: Any,
    clock: FakeClock,
    done: Any,
    step: timedelta = timedelta(seconds=20),
    timeout: float = 30,
) -> Any:
    """Passes of `loop`, the clock moved `step` before each, until `done()` is truthy."""

    def once() -> Any:
        clock.advance(step)
        loop.run_once()
        return done()

    return wait_for(once, timeout=timeout, every=0.05)


def test_growing_a_pool_older_than_its_launch_timeout_keeps_it_and_its_jobs(
    kube: Any, tmp_path: Path
) -> None:
    """A resize recorded the pool as `creating`, and the launch timeout, counted from the pool's
    creation, then failed it and deleted it under the job running on it."""
    cfg = one_target_config(tmp_path)
    clock = FakeClock()
    cluster, remote, provider = cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    # No GPUs on-prem: every job goes to the cloud.
    local = cms_ml(kube, job_manifest("first", 1, deadline="4h", seconds=3600))
    observer = Observer(kube, clock).start()
    try:
        assert observer.wait_synced()
        wait_for(lambda: observer.workloads())
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)

        passes_until(loop, clock, lambda: states(sessions).get("first") == "dispatched")
        # The pool has been up longer than its launch timeout (3 x 10 min), within its lifetime.
        clock.advance(timedelta(minutes=40))
        second = job_manifest("second", 1, deadline="4h", seconds=60)
        local.batch.create_namespaced_job("cms-ml", second, _preload_content=False)
        wait_for(lambda: len(observer.workloads()) == 2)
        passes_until(loop, clock, lambda: states(sessions).get("second") == "dispatched")
        with sessions() as s:
            pools = [(p.name, p.state, p.state_reason) for p in s.scalars(select(Pool))]
            assert len(pools) == 1, pools
            (pool,) = s.scalars(select(Pool)).all()
            assert pool.state in ("ready", "resizing") and pool.nodes_desired == 2
        passes_until(
            loop,
            clock,
            lambda: states(sessions) == {"first": "succeeded", "second": "succeeded"},
            timedelta(minutes=1),
        )
        with sessions() as s:
            (pool,) = s.scalars(select(Pool)).all()
            assert pool.state != "failed", pool.state_reason
        assert provider.world.pools_created() == 1
    finally:
        observer.stop()
        cluster.stop()
        engine.dispose()


def test_a_pool_that_never_came_up_is_charged_for_its_nodes_until_let_go(
    kube: Any, tmp_path: Path
) -> None:
    """Clouds bill a failed launch's instances from their launch until they are deleted (EC2 bills
    an instance from its start whether or not it joins the cluster). A pool that failed was deleted
    in the cloud and never metered: the ledger said 0 where the bill said minutes of nodes."""
    cfg = one_target_config(tmp_path)
    clock = FakeClock()
    state = tmp_path / "cloud.json"  # the cloud's own record of its nodes' lifetimes
    world = SimCloud(clock, settings=SimSettings(failure_rate=1.0), state=state)
    provider = SimProvider(
        world, target="sim-aws", cloud="aws", region="eu-central-1", offers=lambda: list(SHIPPED)
    )
    engine, sessions = sessions_in(tmp_path)
    cms_ml(kube, job_manifest("doomed", 2, deadline="4h", seconds=3600))
    observer = Observer(kube, clock).start()
    try:
        assert observer.wait_synced()
        wait_for(lambda: observer.workloads())
        loop = reconciler_for(
            cfg, SHIPPED, clock, sessions, observer, kube, {}, {"sim-aws": provider}
        )

        def failed() -> list[Pool]:
            with sessions() as s:
                return list(s.scalars(select(Pool).where(Pool.state == "failed")))

        (pool,) = passes_until(loop, clock, failed)[:1]
        (cloud,) = [
            p for p in json.loads(state.read_text())["pools"] if p["spec"]["name"] == pool.name
        ]
        assert cloud["deleted"] and cloud["gone"], cloud  # let go at once, its nodes ended
        offer = SHIPPED.get(OfferKey(**cloud["spec"]["offer"]))
        assert offer is not None
        billed = sum(
            BILLING["aws"].billable(
                (
                    datetime.fromisoformat(n["ended"]) - datetime.fromisoformat(n["launched"])
                ).total_seconds()
            )
            for n in cloud["gone"]
        )
        with sessions() as s:
            charged = sum(
                e.amount_micros
                for e in s.scalars(select(LedgerEntry).where(LedgerEntry.pool == pool.name))
            )
        assert billed > 0
        assert abs(charged - billed * offer.hourly.micros / 3600) <= 2, (charged, billed)
    finally:
        observer.stop()
        engine.dispose()


@dataclass
class OneJob:
    """One burstable job of an hour, `far`, dispatched to the one target's pool through a
    cluster a test can cut off (`gate`) and a cloud whose faults it can set (`world`)."""

    cfg: config.Config
    clock: FakeClock
    sessions: sessionmaker[Session]
    loop: Any
    local: KubeObjects
    gate: Gate
    world: SimCloud
    provider: SimProvider

    def states(self) -> tuple[str | None, str | None]:
        """The job's state and its pool's, in the database."""
        with self.sessions() as s:
            return s.scalar(select(Workload.state)), s.scalar(select(Pool.state))

    def pools_in_cloud(self) -> list[Any]:
        assert self.cfg.service is not None
        return self.provider.list_pools(self.cfg.service.spec.installation_id)


@contextlib.contextmanager
def one_job_dispatched(kube: Any, tmp_path: Path, capacity: str = "on-demand") -> Iterator[OneJob]:
    cfg = one_target_config(tmp_path, capacity)
    clock = FakeClock()
    cluster, gate, remote, world, provider = gated_cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    local = cms_ml(kube, job_manifest("far", 1, deadline="4h", seconds=3600))
    observer = Observer(kube, clock).start()
    try:
        assert observer.wait_synced()
        wait_for(lambda: observer.workloads())
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)
        job = OneJob(cfg, clock, sessions, loop, local, gate, world, provider)
        passes_until(loop, clock, lambda: job.states()[0] == "dispatched", THIRTY, timeout=60)
        yield job
    finally:
        gate.close()
        observer.stop()
        cluster.stop()
        engine.dispose()


def test_a_cluster_lost_past_its_grace_has_its_pools_deleted_so_no_copy_runs_twice(
    kube: Any, tmp_path: Path
) -> None:
    """Its jobs were requeued on-prem while their copies kept running on its nodes, which the
    cloud's API could still delete: the soak saw a job run on-prem and in the cloud at once."""
    with one_job_dispatched(kube, tmp_path) as job:
        job.gate.shut()  # silent past its grace: requeued
        passes_until(job.loop, job.clock, lambda: job.states()[0] == "requeued", THIRTY, 60)
        with job.sessions() as s:
            (pool,) = s.scalars(select(Pool)).all()
            assert pool.state == "deleted" and "stopped answering" in (pool.state_reason or "")
        assert job.pools_in_cloud() == []


def test_a_requeued_job_bursts_again_once_its_cluster_answers_and_not_to_spot(
    kube: Any, tmp_path: Path
) -> None:
    """A job requeued on-prem when its cluster went silent was never looked at again by the
    plan: it waited on-prem for as long as on-prem was full, past its deadline. Now it may burst
    again, with a new copy; not while its cluster is silent (a pool could be made there, its copy
    not), and not to spot (a copy of it was lost once)."""
    with one_job_dispatched(kube, tmp_path, capacity="spot-if-slack") as job:
        job.gate.shut()
        passes_until(job.loop, job.clock, lambda: job.states()[0] == "requeued", THIRTY, 60)
        for _ in range(10):  # five silent minutes: nothing made where nothing can run
            job.clock.advance(THIRTY)
            job.loop.run_once()
        assert job.states()[0] == "requeued" and job.pools_in_cloud() == []
        job.gate.open()
        passes_until(job.loop, job.clock, lambda: job.states()[0] == "dispatched", THIRTY, 60)
        with job.sessions() as s:
            attempts = [d.attempt for d in s.scalars(select(Dispatch).order_by(Dispatch.id))]
            capacities = [p.capacity for p in s.scalars(select(Pool).order_by(Pool.id))]
        assert attempts == [1, 2] and capacities == ["spot", "on-demand"]


def test_a_lost_clusters_job_resumes_on_prem_only_once_the_cloud_has_deleted_its_pool(
    kube: Any, tmp_path: Path
) -> None:
    """The long soak: a cluster went silent past its grace while the cloud's API answered "Rate
    exceeded"; the job resumed on-prem at once while the pool burst could not delete yet kept its
    copy running for seven seconds (`two_copies`). It now waits, suspended, for the pool to go."""
    with one_job_dispatched(kube, tmp_path) as job:
        job.gate.shut()
        job.world.faults.throttled_until = job.clock.now() + timedelta(hours=1)
        for _ in range(30):  # fifteen minutes: past the grace, every cloud call refused
            job.clock.advance(THIRTY)
            job.loop.run_once()
        assert job.states() == ("dispatched", "deleting")
        jobs = job.local.batch
        assert jobs.read_namespaced_job("far", "cms-ml").spec.suspend  # not resumed
        # and the job says why it waits, once, however many passes the cloud refuses
        told = [
            e.message
            for e in job.local.core.list_namespaced_event("cms-ml").items
            if e.involved_object.name == "far" and e.reason == "WaitingForPoolDeletion"
        ]
        assert len(told) == 1 and "sim-aws stopped answering" in told[0], told
        job.world.faults.throttled_until = None
        passes_until(
            job.loop, job.clock, lambda: job.states() == ("requeued", "deleted"), THIRTY, 60
        )
        assert not jobs.read_namespaced_job("far", "cms-ml").spec.suspend


def test_a_cluster_found_lost_while_its_copies_are_listed_has_its_pools_deleted_too(
    kube: Any, tmp_path: Path
) -> None:
    """A pass read which clusters were lost, then listed the copies: the listing timed out and the
    cluster's grace ran out meanwhile, so its jobs were requeued but its pools were not deleted as
    the lost cluster's. It answered again, and the idle TTL took the pool from under the copy still
    running there (the long soak's `work_lost_to_burst`). The clock moves inside the listing, as a
    real one does while a connection times out."""
    with one_job_dispatched(kube, tmp_path) as job:
        job.gate.shut()
        job.loop.run_once()  # its silence starts
        assert job.states()[0] == "dispatched"
        listing = job.loop.remote.syncer.copies

        def slow_listing(*args: Any) -> Any:
            job.clock.advance(timedelta(minutes=11))  # past the 10 minute grace, timing out
            return listing(*args)

        job.loop.remote.syncer.copies = slow_listing
        job.loop.run_once()
        assert job.states()[0] == "requeued"
        with job.sessions() as s:
            (pool,) = s.scalars(select(Pool)).all()
            assert pool.state == "deleted" and "stopped answering" in (pool.state_reason or "")
        assert job.pools_in_cloud() == []


def test_a_runtime_learned_from_finished_runs_plans_the_dispatch_and_the_api_says_so(
    kube: Any, tmp_path: Path
) -> None:
    """`far` declares no runtime; three earlier runs of it took an hour each (their status as the
    Job controller writes it): its dispatch is planned with an hour, and the API says whence."""
    cfg = one_target_config(tmp_path)
    clock = FakeClock()
    cluster, remote, provider = cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    far = job_manifest("far", 1, deadline="4h", seconds=3600)
    del far["metadata"]["annotations"]["burst.dev/expected-runtime"]
    local = cms_ml(kube, far)
    stamp = {"type": "", "status": "True", "lastTransitionTime": "2026-11-30T09:00:00Z"}
    for n in range(3):
        run = job_manifest(f"far-{n}", 1, deadline=None, burstable=False, seconds=3600)
        run["spec"]["suspend"] = True
        local.batch.create_namespaced_job("cms-ml", run, _preload_content=False)
        status = {
            "conditions": [{**stamp, "type": t} for t in ("SuccessCriteriaMet", "Complete")],
            "startTime": "2026-11-30T08:00:00Z",
            "completionTime": "2026-11-30T09:00:00Z",
        }
        local.batch.patch_namespaced_job_status(f"far-{n}", "cms-ml", {"status": status})
    observer = Observer(kube, clock).start()
    try:
        assert observer.wait_synced()
        wait_for(lambda: observer.workloads())
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)
        passes_until(loop, clock, lambda: states(sessions).get("far") == "dispatched")
        app = create_app(sessions, token=None, now=clock.now)
        route = next(r for r in app.routes if getattr(r, "path", "") == "/api/v1/workloads")
        (listed,) = route.endpoint(state=None)  # type: ignore[attr-defined]
        assert listed["expected_runtime_s"] == 3600
        assert listed["runtime_source"] == "learned: p80 of the last 3 runs of cms-ml/far/1"
    finally:
        observer.stop()
        cluster.stop()
        engine.dispose()


def test_an_idle_pool_grown_for_new_work_is_not_deleted_as_idle_while_it_grows(
    kube: Any, tmp_path: Path
) -> None:
    """Its jobs done, a pool counted as idle; the next pass grew it for two new jobs, and a pool
    `resizing` was never counted busy again: four seconds later (the idle TTL) it was deleted
    under the job already running on it (the long soak's `work_lost_to_burst`)."""
    cfg = one_target_config(tmp_path)
    clock = FakeClock()
    cluster, remote, provider = cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    local = cms_ml(kube, job_manifest("first", 1, deadline="4h", seconds=60))
    observer = Observer(kube, clock).start()
    try:
        assert observer.wait_synced()
        wait_for(lambda: observer.workloads())
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)

        for _ in range(60):  # the launch takes minutes, then the job one
            clock.advance(timedelta(seconds=20))
            loop.run_once()
            if states(sessions)["first"] == "succeeded":
                break
        assert loop.teardown.idle_since  # idle now, within its TTL
        for name in ("second", "third"):  # one fits its node, the other needs one more
            job = job_manifest(name, 1, deadline="4h", seconds=3600)
            local.batch.create_namespaced_job("cms-ml", job, _preload_content=False)
        wait_for(lambda: {"second", "third"} <= {w.name for w in observer.workloads()})
        loop.run_once()
        with sessions() as s:
            (pool,) = s.scalars(select(Pool)).all()
            assert (pool.state, pool.nodes_desired) == ("resizing", 2)
        # The new node takes minutes (the simulated launch), far past the 4 s idle TTL.
        for _ in range(30):
            clock.advance(timedelta(seconds=2))
            loop.run_once()
            with sessions() as s:
                (pool,) = s.scalars(select(Pool)).all()
                assert pool.state in ("resizing", "ready"), pool.state_reason
        assert states(sessions)["second"] == "dispatched"
    finally:
        observer.stop()
        cluster.stop()
        engine.dispose()


def test_an_idle_pool_with_no_work_expected_before_a_launch_goes_at_once_rather_than_a_ttl_later(
    kube: Any, tmp_path: Path
) -> None:
    """A policy whose idle TTL is chosen against the next arrival, with a TTL of an hour: its two
    jobs done and nothing waiting, its last hour's two sends put the next in 30 minutes, later
    than its 10-minute launch, and the pool goes at the next pass."""
    cfg = one_target_config(tmp_path)
    text = (tmp_path / "config.yaml").read_text()
    text = text.replace("idleTtl: 4s", "idleTtl: 1h\n    idleTtlChoice: next-arrival")
    (tmp_path / "config.yaml").write_text(text)
    cfg = config.load([tmp_path], config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()))
    clock = FakeClock()
    cluster, remote, provider = cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    cms_ml(
        kube,
        *(job_manifest(name, 1, deadline="4h", seconds=60) for name in ("first", "second")),
    )
    observer = Observer(kube, clock).start()
    try:
        assert observer.wait_synced()
        wait_for(lambda: len(observer.workloads()) == 2)
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)
        passes_until(loop, clock, lambda: set(states(sessions).values()) == {"succeeded"})
        done = clock.now()
        passes_until(
            loop, clock, lambda: _one_pool(sessions).state != "ready", step=timedelta(seconds=1)
        )
        assert clock.now() - done <= timedelta(seconds=1)  # the pass that finds it idle
        assert _one_pool(sessions).state_reason == (
            "idle 0s, and its next work is expected in 30m, later than a new pool launches (10m)"
        )
    finally:
        observer.stop()
        cluster.stop()
        engine.dispose()


def _one_pool(sessions: sessionmaker[Session]) -> Pool:
    with sessions() as s:
        (pool,) = s.scalars(select(Pool)).all()
        return pool


def test_a_pool_whose_jobs_are_gone_from_the_cluster_is_still_metered_and_deleted(
    kube: Any, tmp_path: Path
) -> None:
    """Metering a pool annotates each job that used it with its cost; a job its user deleted (or
    its TTL removed) answered 404, and the error failed the pass that deleted or metered the pool
    (the long soak: 66 failed passes). The job's cost is in the ledger; its annotation has
    nowhere to go."""
    with one_job_dispatched(kube, tmp_path) as job:
        job.local.batch.delete_namespaced_job("far", "cms-ml", propagation_policy="Background")
        wait_for(lambda: job.local.read("Job", "cms-ml", "far") is None)
        # Its copy goes with it, the pool idles past its TTL and is deleted: no pass fails.
        two = timedelta(minutes=2)
        passes_until(job.loop, job.clock, lambda: job.states()[1] == "deleted", two, 60)
        with job.sessions() as s:
            assert sum(s.scalars(select(LedgerEntry.amount_micros))) > 0
