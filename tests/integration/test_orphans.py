"""Orphan collection in both directions: cloud pools without a row, rows without a cloud pool."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import select

from burst import config
from burst.amounts import Money
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.cloud.catalog import UnavailableOffers
from burst.cloud.provider import Pool as PoolView
from burst.cloud.provider import PoolNotFound, PoolSpec, ProviderUnavailable
from burst.cloud.provision import Provisioner
from burst.kube.events import EventRecorder
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects, Replicator
from burst.kube.sync import Syncer
from burst.model import CreatePool, OfferKey
from burst.service.loop import Reconciler
from burst.store import database
from burst.store.tables import Dispatch, LedgerEntry, Pool, Workload
from providers.sim import SimCloud, SimProvider
from tests.conftest import ROOT

OFFER = OfferKey("aws", "eu-central-1", "p3.2xlarge", "on-demand", "V100", 1)


def setup(kube: Any, tmp_path: Path) -> tuple[Reconciler, SimProvider, Any, FakeClock]:
    shipped = catalog.shipped()
    cfg = config.load(
        [ROOT / "burst" / "data" / "demo" / "config.yaml"],
        config.Vocabulary(shipped.regions(), shipped.accelerators()),
    )
    clock = FakeClock()
    world = SimCloud(clock)
    sim = SimProvider(
        world, target="sim-aws", cloud="aws", region="eu-central-1", offers=lambda: list(shipped)
    )
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    sessions = database.sessions(engine)
    local = KubeObjects(kube)
    events = EventRecorder(kube, clock)
    reconciler = Reconciler(
        config=cfg,
        catalog=shipped,
        clock=clock,
        sessions=sessions,
        observer=Observer(kube, clock),
        local=local,
        remotes={},
        provisioner=Provisioner({"sim-aws": sim}, clock, UnavailableOffers(clock), "burst-demo"),
        replicator=Replicator(local, events, "burst-demo"),
        syncer=Syncer(local, events, clock, "burst-demo"),
    )
    return reconciler, sim, sessions, clock


def test_a_cloud_pool_without_a_row_is_deleted_after_the_grace(kube: Any, tmp_path: Path) -> None:
    reconciler, sim, _, clock = setup(kube, tmp_path)
    sim.create_pool(
        PoolSpec(name="lost-row", offer=OFFER, nodes=1, owner="burst-demo", policy="p", epoch=1),
        "t",
    )
    sim.create_pool(
        PoolSpec(name="not-ours", offer=OFFER, nodes=1, owner="someone-else", policy="p", epoch=1),
        "t",
    )
    assert (
        reconciler.teardown.collect_orphans(grace=timedelta(minutes=10)) == []
    )  # first seen: wait
    clock.advance(timedelta(minutes=10))
    assert reconciler.teardown.collect_orphans(grace=timedelta(minutes=10)) == [
        "deleted orphan pool sim-aws/lost-row"
    ]
    assert sim.list_pools("burst-demo") == []
    assert [p.name for p in sim.list_pools("someone-else")] == ["not-ours"]


def test_a_row_whose_pool_vanished_is_closed_and_its_work_requeued(
    kube: Any, tmp_path: Path
) -> None:
    reconciler, sim, sessions, clock = setup(kube, tmp_path)
    batch = client.BatchV1Api(kube)
    job = batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "stranded"},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
                },
            },
        },
    )
    with sessions() as s:
        pool = reconciler.provisioner.create(
            s,
            CreatePool(
                "gone-pool",
                "sim-aws",
                "demo-training",
                OFFER,
                1,
                Money.of("3.06", "USD"),
                "test",
                Money.of("1", "USD"),
            ),
        )
        clock.advance(timedelta(hours=1))
        reconciler.provisioner.refresh(s)
        now = clock.now()
        w = Workload(
            uid=job.metadata.uid,
            kind="Job",
            namespace="default",
            name="stranded",
            team="t",
            policy="demo-training",
            state="dispatched",
            gpus_per_pod=1,
            pods=1,
            created_at=now,
            updated_at=now,
        )
        s.add(w)
        s.flush()
        s.add(
            Dispatch(
                workload_id=w.id,
                pool_id=pool.id,
                target="sim-aws",
                remote_namespace="default",
                remote_name="stranded-x",
                state="dispatched",
                epoch=1,
                created_at=now,
                updated_at=now,
            )
        )
        s.commit()
    clock.advance(timedelta(minutes=30))  # the job runs half an hour, then the pool is lost
    sim.delete_pool("gone-pool")  # behind burst's back
    assert reconciler.teardown.collect_orphans() == ["pool gone-pool vanished from sim-aws"]
    with sessions() as s:
        row = s.scalar(select(Pool).where(Pool.name == "gone-pool"))
        assert row is not None and row.state == "deleted"
        assert s.scalar(select(Workload)).state == "requeued"  # type: ignore[union-attr]
        # Jobs on a lost pool were never charged: its half hour was booked as idle.
        used = s.scalars(
            select(LedgerEntry.gpu_seconds).where(
                LedgerEntry.workload_uid == job.metadata.uid, LedgerEntry.kind == "usage"
            )
        ).all()
        assert sum(used) == 1800
    assert batch.read_namespaced_job("stranded", "default").spec.suspend is False
    try:
        sim.get_pool("gone-pool")
        raise AssertionError("the pool should be gone")
    except PoolNotFound:
        pass


def test_a_pool_that_never_becomes_ready_fails_and_its_offer_is_backed_off(
    kube: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reconciler, sim, sessions, clock = setup(kube, tmp_path)
    reconciler.provisioner.launch_timeouts["sim-aws"] = timedelta(seconds=30)
    with sessions() as s:
        reconciler.provisioner.create(
            s,
            CreatePool(
                "slow-pool",
                "sim-aws",
                "demo-training",
                OFFER,
                1,
                Money.of("3.06", "USD"),
                "test",
                Money.of("1", "USD"),
            ),
        )
        clock.advance(timedelta(seconds=31))  # simulated GPU pools take minutes
        reconciler.provisioner.refresh(s)
        row = s.scalar(select(Pool).where(Pool.name == "slow-pool"))
        assert (
            row is not None
            and row.state == "failed"
            and "launch timeout" in (row.state_reason or "")
        )
    # The failure is in the logs with its reason, named by pool, not only in the database.
    (failed,) = [r for r in caplog.records if getattr(r, "state", None) == "failed"]
    assert failed.levelname == "WARNING" and getattr(failed, "pool", None) == "slow-pool"
    assert "launch timeout" in getattr(failed, "reason", "")
    assert OFFER in reconciler.unavailable.current()
    assert sim.list_pools("burst-demo") == []  # and it was let go
    # A replica started after this (a restart, a new leader) starts from the same back-off.
    successor = Provisioner({"sim-aws": sim}, clock, UnavailableOffers(clock), "burst-demo")
    with sessions() as s:
        successor.refresh(s)
    assert successor.unavailable.failures(OFFER) == reconciler.unavailable.failures(OFFER)
    assert OFFER in successor.unavailable.current()
    clock.advance(timedelta(minutes=16))
    assert OFFER not in successor.unavailable.current()  # the first back-off is 15 minutes
    from prometheus_client import REGISTRY

    timed = REGISTRY.get_sample_value(
        "burst_provider_call_seconds_count",
        {"target": "sim-aws", "operation": "create_pool", "outcome": "ok"},
    )
    assert timed is not None and timed >= 1


class _Refusing(SimProvider):
    """A target whose cloud answers every delete (or every list) with an error."""

    def __init__(self, *args: Any, refuse: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refuse = refuse

    def delete_pool(self, name: str) -> None:
        if self.refuse == "delete":
            raise ProviderUnavailable("503 ServiceUnavailable")
        super().delete_pool(name)

    def list_pools(self, owner: str) -> list[PoolView]:
        if self.refuse == "list":
            raise ProviderUnavailable("503 ServiceUnavailable")
        return super().list_pools(owner)


def test_one_target_failing_does_not_stop_collection_on_the_others(
    kube: Any, tmp_path: Path
) -> None:
    reconciler, sim, _, _ = setup(kube, tmp_path)
    kwargs: dict[str, Any] = {"cloud": "aws", "region": "eu-central-1", "offers": sim._offers}
    broken = _Refusing(sim.world, target="a-broken", refuse="delete", **kwargs)
    blind = _Refusing(sim.world, target="b-blind", refuse="list", **kwargs)
    reconciler.provisioner.providers.update({"a-broken": broken, "b-blind": blind})
    for provider, name in ((broken, "stuck"), (sim, "lost-row")):
        provider.create_pool(
            PoolSpec(name=name, offer=OFFER, nodes=1, owner="burst-demo", policy="p", epoch=1), "t"
        )
    reconciler.teardown.collect_orphans(grace=timedelta(0))
    assert [p.name for p in sim.list_pools("burst-demo")] == []  # sim-aws collected
    assert [p.name for p in broken.list_pools("burst-demo")] == ["stuck"]  # waits for next time


def test_a_launch_the_cloud_calls_failed_is_let_go_at_once(kube: Any, tmp_path: Path) -> None:
    """A CREATE_FAILED node group, a GKE pool running with errors: the cloud says the launch
    failed while nodes may still be billed. The pool fails, its offer backs off, and it is
    deleted then, not left for orphan collection."""
    reconciler, sim, sessions, clock = setup(kube, tmp_path)
    sim.world.settings = replace(sim.world.settings, failure_rate=1.0)
    with sessions() as s:
        reconciler.provisioner.create(
            s,
            CreatePool(
                "doomed",
                "sim-aws",
                "demo-training",
                OFFER,
                1,
                Money.of("3.06", "USD"),
                "test",
                Money.of("1", "USD"),
            ),
        )
        clock.advance(timedelta(minutes=30))
        reconciler.provisioner.refresh(s)
        row = s.scalar(select(Pool).where(Pool.name == "doomed"))
        assert row is not None and row.state == "failed"
        assert "simulated launch failure" in (row.state_reason or "")
    assert OFFER in reconciler.unavailable.current()
    assert sim.list_pools("burst-demo") == []
