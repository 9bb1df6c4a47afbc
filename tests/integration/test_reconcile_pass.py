"""One reconcile pass against a sandbox cluster and a simulated cloud: a pool the cloud refuses for
capacity sends its workload to the next-best offer in the same pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from burst import config
from burst.amounts import Money
from burst.app import reconciler_for
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.config import Config
from burst.demo.scenario import job_manifest
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects
from burst.model import CancelDispatch, CreatePool, OfferKey, Plan
from burst.model import Dispatch as DispatchAction
from burst.sandbox import gpu_node
from burst.service.loop import Reconciler, _fresh_names
from burst.sim import variants
from burst.store import database
from burst.store.tables import Dispatch, Pool, Workload
from providers.sim import LATENCY, Latency, SimCloud, SimProvider, SimSettings
from tests.builders import NOW, pool_row
from tests.conftest import ROOT, wait_for

SHIPPED = catalog.shipped()
CFG = config.load(
    [ROOT / "burst" / "data" / "demo" / "config.yaml"],
    config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()),
)


@contextmanager
def reconciling(
    kube: Any, db_dir: Path, cfg: Config, clock: FakeClock, settings: SimSettings
) -> Iterator[tuple[Reconciler, sessionmaker[Session]]]:
    """A reconciler of `cfg` against the sandbox and a simulated cloud on `clock`, its watch
    synced, and its database's sessions."""
    world = SimCloud(clock, settings=settings)
    assert cfg.service is not None
    providers = {
        t.name: SimProvider(
            world, target=t.name, cloud=t.cloud, region=t.region, offers=lambda: list(SHIPPED)
        )
        for t in cfg.service.spec.targets
    }
    engine = database.make_engine(f"sqlite:///{db_dir / 'burst.db'}")
    database.upgrade(engine)
    sessions = database.sessions(engine)
    observer = Observer(kube, clock).start()
    try:
        observer.wait_synced()
        wait_for(lambda: observer.workloads())
        yield reconciler_for(cfg, SHIPPED, clock, sessions, observer, kube, {}, providers), sessions
    finally:
        observer.stop()
        engine.dispose()


MINUTE = timedelta(minutes=1)


def _dispatched(
    s: Session,
    pool: Pool,
    uid: str,
    name: str,
    state: str,
    at: datetime,
    runtime_s: int | None = None,
    started_at: datetime | None = None,
) -> None:
    """A one-GPU workload of cms-ml and its dispatch onto `pool` (added too), `state` since `at`,
    its copy seen running since `started_at`."""
    work = Workload(
        uid=uid,
        kind="Job",
        namespace="cms-ml",
        name=name,
        team="cms-ml",
        gpus_per_pod=1,
        state=state,
        expected_runtime_s=runtime_s,
        created_at=at,
        updated_at=at,
    )
    s.add_all([pool, work])
    s.flush()
    s.add(
        Dispatch(
            workload_id=work.id,
            pool_id=pool.id,
            attempt=1,
            target=pool.target,
            remote_namespace="",
            remote_name=f"planned-{uid}-1",
            state=state,
            epoch=1,
            created_at=at,
            updated_at=at,
            started_at=started_at,
        )
    )
    s.commit()


def one_pass(kube: Any, tmp_path: Path, settings: SimSettings) -> list[tuple[str, str, OfferKey]]:
    """Run one pass; returns the pools it asked for: (state, reason, offer)."""
    tmp_path.mkdir()
    with reconciling(kube, tmp_path, CFG, FakeClock(), settings) as (reconciler, sessions):
        reconciler.run_once()
        with sessions() as s:
            pools = list(s.scalars(select(Pool).order_by(Pool.id)))
            planned = s.scalars(select(Dispatch).where(Dispatch.state == "planned")).all()
            assert [d.pool_id for d in planned] == [pools[-1].id]  # the job waits on the last
            return [
                (p.state, p.state_reason or "", reconciler.provisioner.spec(p).offer) for p in pools
            ]


def test_a_capacity_refusal_is_followed_by_the_next_best_offer_in_the_same_pass(
    kube: Any, tmp_path: Path
) -> None:
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    local.batch.create_namespaced_job(
        "cms-ml", job_manifest("needs-a-cloud", 2, deadline="1h"), _preload_content=False
    )
    ((_, _, cheapest),) = one_pass(kube, tmp_path / "free", SimSettings())
    refused, chosen = one_pass(kube, tmp_path / "short", SimSettings(capacity={cheapest: 0}))
    assert refused[0] == "failed" and "capacity" in refused[1] and refused[2] == cheapest
    assert chosen[0] in ("requested", "creating") and chosen[2] != cheapest


def test_a_dispatch_planned_onto_a_pool_that_launches_late_moves_before_any_copy_is_made(
    kube: Any, tmp_path: Path
) -> None:
    """A 5 s job with 32 s to its deadline goes to spot (spot-if-slack: a launch of 9 s at the
    slowest and one restart fit). Its pool does not come up (launches here take an hour). 12 s
    on, past the pool's 8 s estimate and before its launch timeout (3 estimates), a start when
    the pool is now expected (its estimate again from now) leaves no room for a restart: the
    pass cancels the planned dispatch and plans the job on demand, where it finishes in time.
    No copy was made on the late pool, so it runs once."""
    cfg = variants.with_placement(CFG, "demo-training", capacity="spot-if-slack")
    start = datetime.now(UTC).replace(microsecond=0)
    clock = FakeClock(start)
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    deadline = (start + timedelta(seconds=32)).isoformat()
    job = job_manifest("tight", 1, deadline=deadline, seconds=5)
    local.batch.create_namespaced_job("cms-ml", job, _preload_content=False)
    hour = Latency(median_s=3600, sigma=0.0, cap_s=3600)
    slow = SimSettings(latency={c: hour for c in LATENCY})
    with reconciling(kube, tmp_path, cfg, clock, slow) as (reconciler, sessions):
        reconciler.run_once()
        clock.advance(12)
        reconciler.run_once()
        with sessions() as s:
            rows = s.execute(
                select(Dispatch.state, Dispatch.state_reason, Pool.capacity, Pool.state)
                .join(Pool, Pool.id == Dispatch.pool_id)
                .order_by(Dispatch.id)
            ).all()
    (first, second) = rows
    assert first[0] == "cancelled" and first[2] == "spot" and first[3] == "creating"
    assert "is late to launch" in (first[1] or "")
    assert second[0] == "planned" and second[2] == "on-demand"  # and nothing dispatched


@pytest.mark.parametrize("state", ["planned", "dispatched"])
def test_a_dispatch_is_moved_only_while_it_is_still_planned(
    kube: Any, tmp_path: Path, state: str
) -> None:
    """A plan moves a dispatch it saw planned: the pass cancels it and plans the new one. Should
    its copy have been made since, the cancel is refused and the plan's new dispatch of it is not
    made: the job would run on two pools."""
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    local.batch.create_namespaced_job(
        "cms-ml", job_manifest("moved", 1, deadline="1h"), _preload_content=False
    )
    with reconciling(kube, tmp_path, CFG, FakeClock(NOW), SimSettings()) as (reconciler, sessions):
        (job,) = reconciler.observer.workloads()
        with sessions() as s:
            late, other = pool_row(name="late", state="creating"), pool_row(name="other")
            s.add(other)
            _dispatched(s, late, job.uid, "moved", state, NOW)
            moved = Plan(
                (
                    CancelDispatch(job.uid, "late", "placed again: its pool late is late"),
                    DispatchAction(job.uid, "other", "aws-eu", "r", Money.zero("USD"), NOW),
                ),
                (),
            )
            reconciler._act(s, moved)
            rows = s.execute(
                select(Pool.name, Dispatch.state).join(Pool).order_by(Dispatch.id)
            ).all()
    if state == "planned":
        assert [tuple(r) for r in rows] == [("late", "cancelled"), ("other", "planned")]
    else:
        assert [tuple(r) for r in rows] == [("late", "dispatched")]


def _past_its_lifetime() -> Pool:
    """A ready pool of one node of 4 V100 for demo-training, made an hour ago: past its lifetime."""
    return pool_row(
        name="old",
        target="sim-aws",
        provider="sim",
        region="eu-central-1",
        instance_type="p3.8xlarge",
        gpus_per_node=4,
        unit_price_micros=15_290_000,
        policy="demo-training",
        state="ready",
        created_at=NOW - timedelta(hours=1),
    )


@pytest.mark.parametrize("told", [True, False])
def test_at_the_pool_limit_a_pool_past_its_lifetime_takes_a_run_that_ends_before_its_own(
    kube: Any, tmp_path: Path, told: bool
) -> None:
    """One pool allowed, and it is past its 10-minute lifetime with 3 of its 4 V100 free: a job
    on it was dispatched 10 minutes ago and told it runs an hour. The pass plans a new 5 s job
    into the free room, since it ends before that one does: the pool stays up no longer. With
    no runtime known for the job on it, the pool's end is not known, and it takes nothing."""
    cfg = variants.with_limits(CFG, "demo-training", max_pools=1)
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    local.batch.create_namespaced_job(
        "cms-ml", job_manifest("short", 1, deadline="1h", seconds=5), _preload_content=False
    )
    clock = FakeClock(NOW)
    with (
        reconciling(kube, tmp_path, cfg, clock, SimSettings()) as (reconciler, sessions),
        sessions() as s,
    ):
        old = _past_its_lifetime()
        runtime_s = 3600 if told else None
        _dispatched(s, old, "long", "long", "dispatched", NOW - 10 * MINUTE, runtime_s)
        plan = reconciler._plan(s, ())
    placed = [a for a in plan.actions if isinstance(a, DispatchAction)]
    if told:
        (dispatch,) = placed
        assert dispatch.pool == "old" and "past its lifetime" in dispatch.reason
    else:
        assert not placed and "max 1 pools reached" in plan.skips[0].reason


@pytest.mark.parametrize(
    ("runtime_s", "started"),
    [(3600, 5), (3600, None), (1200, 50)],
    ids=["started late", "not running", "past its estimate"],
)
def test_a_run_on_a_pool_is_expected_to_end_a_runtime_after_its_copy_started(
    kube: Any, tmp_path: Path, runtime_s: int, started: int | None
) -> None:
    """The pool of the test above, its job dispatched 50 minutes ago for an hour's run, but seen
    running only 5 minutes ago (its pool came up late): it ends in 55 minutes, not 10, and a new
    30-minute job fits in the room before it. Not seen running yet, it ends an hour from now at
    the soonest, and the job fits too. Seen running 50 minutes ago and told 20, it has run half
    an hour past its estimate and is expected to run on for 50 minutes more (runtimes.run_end):
    the job fits; taken to have ended with its estimate, the pool took nothing."""
    cfg = variants.with_limits(CFG, "demo-training", max_pools=1)
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    local.batch.create_namespaced_job(
        "cms-ml", job_manifest("half", 1, deadline="2h", seconds=1800), _preload_content=False
    )
    with (
        reconciling(kube, tmp_path, cfg, FakeClock(NOW), SimSettings()) as (reconciler, sessions),
        sessions() as s,
    ):
        old = _past_its_lifetime()
        since = None if started is None else NOW - started * MINUTE
        _dispatched(s, old, "long", "long", "dispatched", NOW - 50 * MINUTE, runtime_s, since)
        plan = reconciler._plan(s, ())
    (dispatch,) = [a for a in plan.actions if isinstance(a, DispatchAction)]
    assert dispatch.pool == "old" and "past its lifetime" in dispatch.reason


def test_a_dispatch_records_the_policys_default_runtime_when_nothing_else_is_known(
    kube: Any, tmp_path: Path
) -> None:
    """A job that declares no runtime and has no earlier runs is planned with the policy's
    default (8 s in the demo), and its dispatch records it, as the API's workloads say: the next
    pass then knows when its pool's work ends."""
    manifest = job_manifest("unsaid", 1, deadline="1h")
    del manifest["metadata"]["annotations"]["burst.dev/expected-runtime"]
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    local.batch.create_namespaced_job("cms-ml", manifest, _preload_content=False)
    with reconciling(kube, tmp_path, CFG, FakeClock(), SimSettings()) as (reconciler, sessions):
        reconciler.run_once()
        with sessions() as s:
            row = s.scalars(select(Workload).where(Workload.name == "unsaid")).one()
            assert (row.expected_runtime_s, row.runtime_source) == (8, "the policy's default")


def test_no_plan_before_the_watch_has_listed_everything(kube: Any, tmp_path: Path) -> None:
    """The first plan did not wait for synced caches: with the jobs listed and the nodes not yet,
    on-prem looked empty and every pending job went to a cloud."""
    client.CoreV1Api(kube).create_node(gpu_node("v100-0", "Tesla-V100-SXM2-16GB", 8))
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    job = job_manifest("fits-on-prem", 2, deadline="1h")
    job["spec"]["suspend"] = True
    local.batch.create_namespaced_job("cms-ml", job, _preload_content=False)
    clock = FakeClock()
    assert CFG.service is not None
    providers = {
        t.name: SimProvider(
            SimCloud(clock),
            target=t.name,
            cloud=t.cloud,
            region=t.region,
            offers=lambda: list(SHIPPED),
        )
        for t in CFG.service.spec.targets
    }
    engine = database.make_engine(f"sqlite:///{tmp_path / 'burst.db'}")
    database.upgrade(engine)
    observer = Observer(kube, clock)
    observer.jobs.relist()  # the jobs are in, the nodes are not
    reconciler = reconciler_for(
        CFG, SHIPPED, clock, database.sessions(engine), observer, kube, {}, providers
    )
    assert reconciler.run_once().plan.actions == ()
    with database.sessions(engine)() as s:
        assert not s.scalars(select(Pool)).all()
    engine.dispose()


def test_a_renamed_pool_does_not_take_the_name_of_another_the_plan_creates(tmp_path: Path) -> None:
    """A plan creating X-3 and X-4 while X-1 to X-3 were once taken renamed X-3 to X-4, the first
    free name in the database, and the pass died inserting X-4 twice (uq_pools_name; a soak).
    A renamed pool skips the names the plan itself creates; its dispatches follow it."""
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    offer = OfferKey("aws", "eu-central-1", "g6.xlarge", "on-demand", "L4", 1)
    with database.sessions(engine)() as s:
        for generation in (1, 2, 3):  # all gone: names are never reused
            s.add(pool_row(name=f"sim-aws-g6-xlarge-od-{generation}", state="deleted"))
        s.commit()
        create = CreatePool(
            "sim-aws-g6-xlarge-od-3",
            "sim-aws",
            "p",
            offer,
            1,
            Money.zero("USD"),
            "",
            Money.zero("USD"),
        )
        send = DispatchAction("w", "sim-aws-g6-xlarge-od-3", "sim-aws", "", Money.zero("USD"), NOW)
        actions = [create, replace(create, pool="sim-aws-g6-xlarge-od-4"), send]
        named = _fresh_names(s, actions)
    pools = [a.pool for a in named if isinstance(a, CreatePool)]
    assert pools == ["sim-aws-g6-xlarge-od-5", "sim-aws-g6-xlarge-od-4"], pools
    assert named[2].pool == pools[0]  # the dispatch follows its pool
    engine.dispose()
