"""The soak's invariant checker catches each broken promise it looks for: each is planted in
real clusters (in-process sandboxes), a real database and a simulated clouds' state file, and
counted once. (A checker that cannot fail proves nothing about the soak that passes it.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client
from sqlalchemy import text

from burst.clock import FakeClock
from burst.cloud.provider import PoolSpec
from burst.kube.replicate import KubeObjects
from burst.kube.translate import ORIGIN_UID
from burst.model import OfferKey
from burst.sandbox import Sandbox
from burst.store import database
from providers.sim import SimCloud, SimProvider
from tests.conftest import wait_for
from tests.soak.invariants import Checker

OFFER = OfferKey("aws", "eu-central-1", "p3.2xlarge", "on-demand", "V100", 1)


def job(name: str, origin: str) -> dict[str, Any]:
    pod = {"containers": [{"name": "c", "image": "registry.cern.ch/x:1"}], "restartPolicy": "Never"}
    return {
        "metadata": {"name": name, "labels": {ORIGIN_UID: origin}},
        "spec": {"suspend": True, "template": {"spec": pod}},
    }


def ledger_row(db: Any, key: str, namespace: str, micros: int, pool: str | None = None) -> None:
    now = datetime.now(UTC)
    db.execute(
        text(
            "INSERT INTO ledger_entries (idempotency_key, kind, posted_at, period_start, "
            "period_end, pool, namespace, team, gpu_seconds, amount_micros, currency) VALUES "
            "(:k, 'usage', :now, :now, :now, :pool, :ns, :ns, 0, :m, 'USD')"
        ),
        {"k": key, "now": now, "pool": pool, "ns": namespace, "m": micros},
    )


def test_each_broken_promise_is_counted(tmp_path: Path) -> None:
    local_cluster, remote_cluster = Sandbox().start(), Sandbox(controllers=False).start()
    local = client.ApiClient(client.Configuration(host=local_cluster.url))
    remote = KubeObjects(client.ApiClient(client.Configuration(host=remote_cluster.url)))
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    state = tmp_path / "clouds.json"
    clouds = SimCloud(FakeClock(datetime.now(UTC) - timedelta(hours=1)), state=state)
    aws = SimProvider(
        clouds, target="sim-aws", cloud="aws", region="eu-central-1", offers=lambda: []
    )
    checker = Checker(
        engine=engine,
        local=local,
        remote=remote.api,
        state=state,
        installation="soak",
        foreign=("sim-aws", "theirs"),
        orphan_grace=timedelta(0),
        pass_interval=timedelta(0),
        budgets={"theory": 1_000},
        max_pools={"p": 2},
        max_nodes=1,
    )
    try:
        for name, owner in (("ours", "soak"), ("theirs", "other"), ("kept", "soak")):
            spec = PoolSpec(name=name, offer=OFFER, nodes=1, owner=owner, policy="p", epoch=1)
            aws.create_pool(spec, name)
        with engine.begin() as db:
            db.execute(
                text(
                    "INSERT INTO pools (name, token, target, provider, region, instance_type, "
                    "capacity, accelerator, gpus_per_node, nodes_desired, nodes_ready, policy, "
                    "generation, epoch, state, unit_price_micros, currency, price_source, created_at, "
                    "updated_at) VALUES ('kept', 't', 'sim-aws', 'aws', 'eu-central-1', "
                    "'p3.2xlarge', 'on-demand', 'V100', 1, 1, 1, 'p', 1, 1, 'ready', 1, 'USD', "
                    "'catalog', :now, :now)"
                ),
                {"now": datetime.now(UTC)},
            )
            ledger_row(db, "a", "cms-ml", 10)
        checker.tick()
        assert not any(checker.violations.values()), checker.examples
        # Two unfinished copies of one workload, on two looks in a row.
        remote.ensure_namespace("ml")
        remote.batch.create_namespaced_job("ml", job("one", "uid-1"), _preload_content=False)
        remote.batch.create_namespaced_job("ml", job("two", "uid-1"), _preload_content=False)
        for name in ("one", "two"):  # each with a pod running
            pod = {
                "metadata": {
                    "name": f"{name}-pod",
                    "labels": {"batch.kubernetes.io/job-name": name},
                },
                "spec": {"containers": [{"name": "c", "image": "registry.cern.ch/x:1"}]},
            }
            remote.core.create_namespaced_pod("ml", pod, _preload_content=False)
            remote.core.patch_namespaced_pod_status(
                f"{name}-pod", "ml", {"status": {"phase": "Running"}}
            )
        checker.tick()
        # A copy deleted and created again under its name (between two looks).
        remote.batch.delete_namespaced_job("one", "ml", propagation_policy="Background")
        wait_for(lambda: remote.read("Job", "ml", "one") is None)
        remote.batch.create_namespaced_job("ml", job("one", "uid-1"), _preload_content=False)
        # The foreign pool deleted; a pool past its node cap and one too many; a budget
        # overspent; a ledger row changed behind the trigger.
        aws.delete_pool("theirs", by="burst")
        # A copy's pod failed with a node burst removed: pod GC's mark on it (gcOrphaned).
        (gone,) = [
            n["name"] for p in json.loads(state.read_text())["pools"] for n in p.get("gone", [])
        ]
        lost = {
            "metadata": {"name": "lost-pod"},
            "spec": {
                "nodeName": gone,
                "containers": [{"name": "c", "image": "registry.cern.ch/x:1"}],
            },
        }
        remote.core.create_namespaced_pod("ml", lost, _preload_content=False)
        mark = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}
        remote.core.patch_namespaced_pod_status(
            "lost-pod", "ml", {"status": {"phase": "Failed", "conditions": [mark]}}
        )
        aws.resize_pool("kept", 2)
        aws.create_pool(
            PoolSpec(name="third", offer=OFFER, nodes=1, owner="soak", policy="p", epoch=1), "t3"
        )
        with engine.begin() as db:
            ledger_row(db, "b", "theory", 5_000)
            db.execute(text("DROP TRIGGER ledger_no_update"))
            db.execute(
                text("UPDATE ledger_entries SET amount_micros = 11 WHERE idempotency_key = 'a'")
            )
        checker.tick()
        expected = {
            "two_copies": 1,
            "copy_created_twice": 1,
            "orphan_pool": 2,  # "ours" has no row, past a zero grace, on each later look
            "foreign_pool_touched": 1,
            "budget_exceeded": 1,
            "cap_exceeded": 2,
            "ledger_changed": 1,
            "work_lost_to_burst": 1,
        }
        assert {k: v for k, v in checker.violations.items() if v} == expected, checker.examples
        # At the end: pools left, their bills missing from the ledger, a malformed job nobody
        # told, and the token in a log.
        KubeObjects(local).ensure_namespace("theory")
        checker.final(
            ["s3cr3t"], ["a log line with s3cr3t in it"], [], ["theory/bad-deadline"], ["ml/skip"]
        )
        final = {k: v for k, v in checker.violations.items() if v}
        assert final["orphan_pool"] >= 5, checker.examples  # and "ours", "kept", "third" left
        assert final["ledger_mismatch"] == 3, checker.examples  # all ran, nothing posted
        assert final["reason_missing"] == 2 and final["credential_leaked"] == 1
        assert json.loads(state.read_text())["pools"]
    finally:
        local_cluster.stop()
        remote_cluster.stop()
        engine.dispose()


def test_the_pass_length_allowed_is_read_from_the_replicas_metrics() -> None:
    """The orphan allowance counts passes as long as the service reports them lately (run 12:
    passes of 20 s, where the checker allowed four of a second)."""
    from prometheus_client import CollectorRegistry, Histogram, start_http_server

    from tests.soak.harness import PassTimes
    from tests.soak.world import free_port

    registry = CollectorRegistry()
    passes = Histogram("burst_pass_seconds", "Time one reconcile pass took", registry=registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        times = PassTimes({"a": port}, token="t", window_s=3600)
        passes.observe(0.5)
        assert times.mean() == timedelta(0)  # a first read has nothing to compare with
        passes.observe(15.0)
        passes.observe(25.0)
        assert times.mean() == timedelta(seconds=20)
        passes.observe(1.0)
        assert times.mean() == timedelta(seconds=20)  # the longest of the window
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_bills_count_pools_the_clouds_have_forgotten(tmp_path: Path) -> None:
    """The simulated clouds forget a pool an hour after its deletion; the checker keeps what it
    saw, so a pool's bill is still checked at the end of a long run."""
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    state, clock = tmp_path / "clouds.json", FakeClock(datetime.now(UTC) - timedelta(hours=3))
    aws = SimProvider(
        SimCloud(clock, state=state),
        target="sim-aws",
        cloud="aws",
        region="eu-central-1",
        offers=lambda: [],
    )
    checker = Checker(
        engine,
        None,
        None,
        state,
        "soak",
        ("sim-aws", "theirs"),
        *[timedelta(0)] * 2,
        budgets={},
        max_pools={"p": 2},
        max_nodes=2,
    )
    aws.create_pool(
        PoolSpec(name="gone", offer=OFFER, nodes=2, owner="soak", policy="p", epoch=1), "g"
    )
    clock.advance(timedelta(minutes=20))
    aws.delete_pool("gone")
    checker.cloud()  # seen deleted, with its two nodes ended
    clock.advance(timedelta(hours=2))
    aws.list_pools("soak")  # the clouds forget it
    assert json.loads(state.read_text())["pools"] == []
    checker._bills(checker.cloud())
    assert checker.violations["ledger_mismatch"] == 1, checker.examples  # 40 node-minutes unbilled
    assert "ledger 0 micro-USD" in checker.examples["ledger_mismatch"][0]
    engine.dispose()
