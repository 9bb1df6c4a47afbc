"""Decision latency in the service: from a burstable job's creation to its pool being requested,
and from a pool being ready to all its jobs' copies being created.

`burst sandbox up` in its own process is the on-prem cluster, another the cloud cluster. N
suspended burstable Jobs with a deadline no on-prem GPU can meet are created (4 client threads);
the reconcile pass runs wired and woken as `burst serve` runs it (by the watch, batched 1.5 s)
against the simulated clouds and a SQLite database. For each job: the time from its create call
returning to the end of the pass that planned it (`p50_s`, `p99_s`); up to `--copies-up-to` jobs, the copies are made too,
and for each job the time from its pool's `ready_at` to its dispatch being recorded once its copy
was created, both as the service wrote them (`copy_p99_s`; `copy_max_s`: the last copy after its
pool came up).

    python benchmarks/bench_decision_latency.py [--jobs 1000,10000] [--copies-up-to 1000]

The first 10,000-job run gave p50 27.3 s / p99 33.5 s: every planned dispatch was its own SQLite
commit; one commit per pass for them halved it; reading the pass's rows in a few queries and
writing new workload rows in one flush brought it to p50 7.6 s / p99 15.4 s on a loaded machine.
A thousand copies were made one after the other in one pass (128 s); their API calls now run in
eight threads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench_pass import job as burstable
from kubernetes import client
from sandbox_process import sandbox_process
from sqlalchemy import select

from burst import config
from burst.app import reconciler_for
from burst.clock import SystemClock
from burst.cloud import catalog
from burst.kube.observe import Observer
from burst.store import database
from burst.store.tables import Dispatch, Pool, Workload
from providers.sim import SimCloud, SimProvider, SimSettings

CONFIG = """\
apiVersion: burst.dev/v1
kind: ServiceConfig
metadata: {name: bench}
spec:
  installationId: bench
  targets:
    - {name: sim-aws, provider: sim, region: eu-central-1, sim: {cloud: aws}, provisioningEstimate: 8m}
    - {name: sim-gcp, provider: sim, region: europe-west4, sim: {cloud: gcp}, provisioningEstimate: 6m}
---
apiVersion: burst.dev/v1
kind: BurstPolicy
metadata: {name: bench}
spec:
  selector: {namespaces: [default]}
  placement: {targets: [sim-aws, sim-gcp]}
  limits: {maxNodesPerPool: 1000, maxPools: 1000}
  replication: {imageRegistries: [registry.cern.ch]}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", default="1000,10000", help="sizes, comma-separated")
    parser.add_argument(
        "--copies-up-to", type=int, default=1000, help="run the copies for sizes up to this"
    )
    args = parser.parse_args()
    for jobs in (int(x) for x in args.jobs.split(",")):
        with (
            sandbox_process() as url,
            sandbox_process() as remote_url,
            tempfile.TemporaryDirectory() as tmp,
        ):
            run(url, remote_url if jobs <= args.copies_up_to else None, Path(tmp), jobs)


def run(url: str, remote_url: str | None, tmp: Path, jobs: int) -> None:
    clock = SystemClock()
    shipped = catalog.shipped()
    (tmp / "c.yaml").write_text(CONFIG)
    cfg = config.load(
        [tmp / "c.yaml"], config.Vocabulary(shipped.regions(), shipped.accelerators())
    )
    assert cfg.service is not None
    engine = database.make_engine(f"sqlite:///{tmp / 'b.db'}")
    database.upgrade(engine)
    sessions = database.sessions(engine)
    api = _client(url)
    remote = _client(remote_url) if remote_url else None
    # With copies, launches 60x faster than real so that pools are ready in seconds; without,
    # at real speed: no pool is ready while the decisions are measured (no cluster to copy to).
    world = SimCloud(clock, settings=SimSettings(speed=60 if remote else 1))
    targets = cfg.service.spec.targets
    providers = {
        t.name: SimProvider(
            world,
            target=t.name,
            cloud=t.cloud,
            region=t.region,
            offers=lambda: list(shipped),
            kube=remote,
        )
        for t in targets
    }
    observer = Observer(api, clock).start()
    observer.wait_synced()
    reconciler = reconciler_for(
        cfg,
        shipped,
        clock,
        sessions,
        observer,
        api,
        {t.name: remote for t in targets} if remote else {},
        providers,
        mirror_copies=True,
    )
    created: dict[str, float] = {}
    planned: dict[str, float] = {}
    copied: dict[str, float] = {}  # workload uid -> seconds from its pool's ready to its copy
    stop = threading.Event()
    passes: list[float] = []

    def service() -> None:  # as `burst serve`: woken by the watch, a pass per batch of changes
        while not stop.is_set():
            if not observer.changed.wait(0.5) and not remote:
                continue
            time.sleep(1.5)
            observer.changed.clear()
            start = time.perf_counter()
            reconciler.run_once()
            end = time.perf_counter()
            passes.append(end - start)
            with sessions() as s:
                for uid in s.scalars(select(Workload.uid).where(Workload.state != "pending")):
                    planned.setdefault(uid, end)
                # Both times as the service recorded them: the pool's ready_at, the dispatch's
                # update when its copy was created.
                for uid, made, ready in s.execute(
                    select(Workload.uid, Dispatch.updated_at, Pool.ready_at)
                    .join(Dispatch, Dispatch.workload_id == Workload.id)
                    .join(Pool, Pool.id == Dispatch.pool_id)
                    .where(Dispatch.state == "dispatched", Pool.ready_at.is_not(None))
                ):
                    copied.setdefault(uid, (made - ready).total_seconds())

    loop = threading.Thread(target=service, daemon=True)
    loop.start()
    batch = client.BatchV1Api(api)

    def make(i: int) -> None:
        job = batch.create_namespaced_job(
            "default", burstable(f"job-{i:05d}"), _preload_content=False
        )
        created[json.loads(job.data)["metadata"]["uid"]] = time.perf_counter()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(make, range(jobs)))
    create_s = time.perf_counter() - t0
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (
        len(planned) < jobs or (remote is not None and len(copied) < jobs)
    ):
        time.sleep(0.2)
    stop.set()
    loop.join()
    latencies = _quantiles([planned[u] - created[u] for u in created if u in planned])
    figures = {
        "bench": "decision_latency",
        "jobs": jobs,
        "planned": len(planned),
        "create_s": round(create_s, 2),
        "p50_s": latencies[49],
        "p99_s": latencies[98],
        "passes": len(passes),
        "slowest_pass_s": round(max(passes), 2),
    }
    if remote is not None:
        waits = _quantiles(list(copied.values()))
        figures |= {
            "copied": len(copied),
            "copy_p50_s": waits[49],
            "copy_p99_s": waits[98],
            "copy_max_s": waits[-1],
        }
    print(json.dumps(figures), flush=True)
    observer.stop()
    for mirror in reconciler.remote.mirrors.values():
        mirror.stop()
    api.close()
    engine.dispose()


def _client(url: str) -> Any:
    configuration = client.Configuration(host=url)
    configuration.connection_pool_maxsize = 8
    return client.ApiClient(configuration)


def _quantiles(values: list[float]) -> list[float]:
    """Percentiles 1..99 then the maximum, rounded to 0.01 s."""
    values = sorted(values) or [float("nan")]
    q = statistics.quantiles(values, n=100) if len(values) > 1 else values * 99
    return [round(x, 2) for x in [*q, values[-1]]]


if __name__ == "__main__":
    main()
