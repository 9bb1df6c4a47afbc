"""Decision latency in the service: from a burstable job's creation to its pool being requested.

`burst sandbox up` in its own process is the on-prem cluster. N suspended burstable Jobs with a
deadline no on-prem GPU can meet are created (4 client threads); the reconcile pass runs as the service runs it,
woken by the watch (batched 1.5 s) against the simulated clouds and a SQLite database. For each
job: the time from its create call returning to the end of the pass that planned it.

    python benchmarks/bench_decision_latency.py [--jobs 10000]

The first 10,000-job run gave p50 27.3 s / p99 33.5 s: every planned dispatch was its own SQLite
commit; one commit per pass for them halved it. What remains is the pass's per-workload ORM reads
and inserts (the decision itself takes 0.4 s of it).
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

from kubernetes import client
from sandbox_process import sandbox_process
from sqlalchemy import select

from burst import config
from burst.clock import SystemClock
from burst.cloud import catalog
from burst.cloud.catalog import UnavailableOffers
from burst.cloud.provision import Provisioner
from burst.kube.events import EventRecorder
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects, Replicator
from burst.kube.sync import Syncer
from burst.service.loop import Reconciler
from burst.store import database
from burst.store.tables import Workload
from providers.sim import SimCloud, SimProvider

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
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    with sandbox_process() as url, tempfile.TemporaryDirectory() as tmp:
        run(url, Path(tmp), args.jobs)


def run(url: str, tmp: Path, jobs: int) -> None:
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
    api_config = client.Configuration(host=url)
    api_config.connection_pool_maxsize = 8
    api = client.ApiClient(api_config)
    world = SimCloud(clock)
    providers = {
        t.name: SimProvider(
            world, target=t.name, cloud=t.cloud, region=t.region, offers=lambda: list(shipped)
        )
        for t in cfg.service.spec.targets
    }
    local = KubeObjects(api)
    events = EventRecorder(api, clock)
    observer = Observer(api, clock).start()
    observer.wait_synced()
    reconciler = Reconciler(
        config=cfg,
        catalog=shipped,
        clock=clock,
        sessions=sessions,
        observer=observer,
        local=local,
        remotes={},
        provisioner=Provisioner(
            providers,
            clock,  # type: ignore[arg-type]
            UnavailableOffers(clock),
            "bench",
        ),
        replicator=Replicator(local, events, "bench"),
        syncer=Syncer(local, events, clock, "bench"),
    )
    created: dict[str, float] = {}
    planned: dict[str, float] = {}
    stop = threading.Event()
    passes: list[float] = []

    def service() -> None:  # as `burst serve`: woken by the watch, a pass per batch of changes
        while not stop.is_set():
            if not observer.changed.wait(0.5):
                continue
            time.sleep(1.5)
            observer.changed.clear()
            start = time.perf_counter()
            reconciler.run_once()
            end = time.perf_counter()
            passes.append(end - start)
            with sessions() as s:
                for uid in s.scalars(select(Workload.uid).where(Workload.state == "planned")):
                    planned.setdefault(uid, end)

    loop = threading.Thread(target=service, daemon=True)
    loop.start()
    batch = client.BatchV1Api(api)

    def make(i: int) -> None:
        job = batch.create_namespaced_job(
            "default",
            {
                "metadata": {
                    "name": f"job-{i:05d}",
                    "labels": {"burst.dev/burstable": "true"},
                    "annotations": {
                        "burst.dev/deadline": "3h",
                        "burst.dev/expected-runtime": "1h",
                    },
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
            },
            _preload_content=False,
        )
        created[json.loads(job.data)["metadata"]["uid"]] = time.perf_counter()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(make, range(jobs)))
    create_s = time.perf_counter() - t0
    deadline = time.monotonic() + 300
    while len(planned) < jobs and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    latencies = sorted(planned[u] - created[u] for u in created if u in planned)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    print(
        json.dumps(
            {
                "bench": "decision_latency",
                "jobs": jobs,
                "planned": len(latencies),
                "create_s": round(create_s, 2),
                "p50_s": round(q[49], 2),
                "p99_s": round(q[98], 2),
                "max_s": round(latencies[-1], 2),
                "passes": len(passes),
                "slowest_pass_s": round(max(passes), 2),
            }
        ),
        flush=True,
    )
    observer.stop()
    api.close()
    engine.dispose()


if __name__ == "__main__":
    main()
