"""A steady reconcile pass at 100, 1,000 and 10,000 dispatched workloads: SQL statements and time.

Two `burst sandbox up` processes are the on-prem and the remote cluster. N suspended burstable Jobs
run on-prem, each with its copy in the remote cluster, dispatched to N/10 ready pools of a
simulated cloud (so 1,000 pools at 10,000), with a ledger of L rows (`--ledger`, filled as
bench_report fills it). The database is seeded as the service would have left it; two passes
settle the annotations and start the watch on the remote copies, then each measured pass is
`Reconciler.run_once()` wired as `burst serve` wires it: statements counted by the engine, wall
time. `changed` is a pass after 1 % of the jobs (at least one) were deleted by their users: the
statements a change costs on top of the steady ones. PostgreSQL as well when `--postgres` or
BURST_TEST_DATABASE_URL names a server.

    python benchmarks/bench_pass.py [--sizes 100,1000,10000] [--ledger 1000000] [--postgres URL]

Before the passes were batched, a steady pass sent about 5 statements per dispatched workload
(5,210 at 1,000, 3.1 s on SQLite) and read every copy over HTTP; now a steady pass is 10
statements whatever the size, and a changed workload about 6 more (savepoints included), its
changes committed together. The remote copies come from a watch, not a list per pass.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench_report import fill
from kubernetes import client
from sandbox_process import sandbox_process
from sqlalchemy import create_engine, insert, text

from burst import config
from burst.app import reconciler_for
from burst.clock import SystemClock
from burst.cloud import catalog
from burst.kube.observe import Observer
from burst.kube.translate import ORIGIN_INSTALLATION, remote_name
from burst.store import database
from burst.store.tables import Dispatch, Pool, PoolEvent, Workload
from providers.sim import SimCloud, SimProvider

CONFIG = """\
apiVersion: burst.dev/v1
kind: ServiceConfig
metadata: {name: bench}
spec:
  installationId: bench
  targets:
    - {name: sim-aws, provider: sim, region: eu-central-1, sim: {cloud: aws}}
---
apiVersion: burst.dev/v1
kind: BurstPolicy
metadata: {name: bench}
spec:
  selector: {namespaces: [default]}
  placement: {targets: [sim-aws]}
  limits: {maxNodesPerPool: 1000, maxPools: 100000}
  replication: {imageRegistries: [registry.cern.ch]}
"""
OFFER = ("p3.2xlarge", "on-demand", "V100", 1)


def job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"burst.dev/burstable": "true", **(labels or {})},
            "annotations": {"burst.dev/deadline": "3h", "burst.dev/expected-runtime": "1h"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "t",
                            "image": "registry.cern.ch/t:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def create_all(api: Any, manifests: list[dict[str, Any]]) -> list[str]:
    batch = client.BatchV1Api(api)

    def make(m: dict[str, Any]) -> str:
        response = batch.create_namespaced_job("default", m, _preload_content=False)
        return str(json.loads(response.data)["metadata"]["uid"])

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(make, manifests))


def seed(url: str, uids: list[str], names: list[str], pools: int) -> None:
    """Rows as the service leaves them with every job dispatched to a ready pool."""
    now = SystemClock().now()
    engine = create_engine(url)
    instance, capacity, accelerator, gpus = OFFER
    with engine.begin() as conn:
        conn.execute(
            insert(Pool),
            [
                {
                    "id": i + 1,
                    "name": f"sim-aws-p3-2xlarge-od-{i + 1}",
                    "token": uuid.uuid4().hex,
                    "target": "sim-aws",
                    "provider": "aws",
                    "region": "eu-central-1",
                    "instance_type": instance,
                    "capacity": capacity,
                    "accelerator": accelerator,
                    "gpus_per_node": gpus,
                    "nodes_desired": len(uids) // pools,
                    "nodes_ready": len(uids) // pools,
                    "policy": "bench",
                    "state": "ready",
                    "unit_price_micros": 3_060_000,
                    "currency": "USD",
                    "price_source": "catalog",
                    "epoch": 1,
                    "created_at": now - timedelta(minutes=20),
                    "updated_at": now - timedelta(minutes=10),
                    "ready_at": now - timedelta(minutes=10),
                }
                for i in range(pools)
            ],
        )
        conn.execute(
            insert(PoolEvent),
            [
                {
                    "pool_id": i + 1,
                    "at": at,
                    "from_state": frm,
                    "to_state": to,
                    "nodes": len(uids) // pools,
                    "epoch": 1,
                }
                for i in range(pools)
                for at, frm, to in (
                    (now - timedelta(minutes=20), "requested", "creating"),
                    (now - timedelta(minutes=10), "creating", "ready"),
                )
            ],
        )
        conn.execute(
            insert(Workload),
            [
                {
                    "id": i + 1,
                    "uid": uid,
                    "kind": "Job",
                    "namespace": "default",
                    "name": name,
                    "team": "default",
                    "policy": "bench",
                    "state": "dispatched",
                    "accelerator": "V100",
                    "gpus_per_pod": 1,
                    "pods": 1,
                    "created_at": now - timedelta(minutes=30),
                    "updated_at": now - timedelta(minutes=9),
                }
                for i, (uid, name) in enumerate(zip(uids, names, strict=True))
            ],
        )
        conn.execute(
            insert(Dispatch),
            [
                {
                    "workload_id": i + 1,
                    "pool_id": i % pools + 1,
                    "attempt": 1,
                    "target": "sim-aws",
                    "remote_namespace": "default",
                    "remote_name": remote_name(name, uid),
                    "state": "dispatched",
                    "state_reason": "ran",
                    "epoch": 1,
                    "created_at": now - timedelta(minutes=9),
                    "updated_at": now - timedelta(minutes=9),
                }
                for i, (uid, name) in enumerate(zip(uids, names, strict=True))
            ],
        )
    engine.dispose()


def measure(local_url: str, remote_url: str, db_url: str, jobs: int, ledger: int) -> dict[str, Any]:
    clock = SystemClock()
    shipped = catalog.shipped()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c.yaml").write_text(CONFIG)
        cfg = config.load(
            [Path(tmp) / "c.yaml"], config.Vocabulary(shipped.regions(), shipped.accelerators())
        )
    local_api = client.ApiClient(client.Configuration(host=local_url))
    remote_api = client.ApiClient(client.Configuration(host=remote_url))
    for api in (local_api, remote_api):
        api.configuration.connection_pool_maxsize = 8
    names = [f"job-{uuid.uuid4().hex[:10]}" for _ in range(jobs)]
    started = time.monotonic()
    uids = create_all(local_api, [job(n) for n in names])
    create_all(
        remote_api,
        [
            job(remote_name(n, u), {ORIGIN_INSTALLATION: "bench"})
            for n, u in zip(names, uids, strict=True)
        ],
    )
    fill_s = 0.0
    if ledger:
        fill_s = fill(db_url, ledger)
    else:
        database.upgrade(database.make_engine(db_url))
    seed(db_url, uids, names, max(1, jobs // 10))
    setup_s = time.monotonic() - started
    engine = database.make_engine(db_url)
    sessions = database.sessions(engine)
    world = SimCloud(clock)
    provider = SimProvider(
        world, target="sim-aws", cloud="aws", region="eu-central-1", offers=lambda: list(shipped)
    )
    observer = Observer(local_api, clock).start()
    observer.wait_synced(120)
    loop = reconciler_for(
        cfg, shipped, clock, sessions, observer, local_api, {"sim-aws": remote_api},
        {"sim-aws": provider}, mirror_copies=True,
    )  # fmt: skip
    for _ in range(2):  # the first passes write the placement annotations, start the mirror
        loop.run_once()
    for mirror in loop.remote.mirrors.values():
        for cache in mirror.caches.values():
            cache.synced.wait(120)
    steady = [loop.run_once() for _ in range(3)]
    gone = names[: max(1, jobs // 100)]
    batch = client.BatchV1Api(local_api)
    for name in gone:
        batch.delete_namespaced_job(name, "default")
    time.sleep(1.0)  # for the watch to see the deletes
    changed = loop.run_once()
    observer.stop()
    for mirror in loop.remote.mirrors.values():
        mirror.stop()
    engine.dispose()
    return {
        "bench": "pass",
        "database": engine.dialect.name,
        "workloads": jobs,
        "pools": max(1, jobs // 10),
        "ledger_rows": ledger,
        "statements": statistics.median(r.statements for r in steady),
        "pass_s": round(statistics.median(r.seconds for r in steady), 3),
        "changed": len(gone),
        "changed_statements": changed.statements,
        "changed_pass_s": round(changed.seconds, 3),
        "setup_s": round(setup_s, 1),
        "fill_s": round(fill_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument(
        "--ledger", type=int, default=1_000_000, help="ledger rows for the largest size"
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BURST_TEST_DATABASE_URL"),
        help="a PostgreSQL server URL to run on as well",
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    for size in sizes:
        ledger = args.ledger if size == max(sizes) else 0
        urls = []
        with tempfile.TemporaryDirectory() as tmp:
            urls.append(f"sqlite:///{tmp}/b.db")
            if args.postgres:
                urls.append(args.postgres)
            for url in urls:
                if url.startswith("postgres"):
                    url = fresh_postgres(url)
                with sandbox_process() as local_url, sandbox_process() as remote_url:
                    print(json.dumps(measure(local_url, remote_url, url, size, ledger)), flush=True)


def fresh_postgres(server: str) -> str:
    """A new database on the server, for this size only."""
    name = f"burst_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(database.resolve_url(server), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return database.resolve_url(server).set(database=name).render_as_string(hide_password=False)


if __name__ == "__main__":
    main()
