"""The on-prem watch with 10,000 pending GPU pods in a sandbox cluster.

`burst sandbox up --nodes 0` runs in its own process. 100 Jobs (handed to another controller with
spec.managedBy, so that the benchmark makes their pods itself, fast) get 100 GPU pods each; the
sandbox scheduler marks every pod Unschedulable. The Observer watches from before the first
create. Measured: from the last pod created to a snapshot with all 100 workloads pending and all
10,000 pods seen Unschedulable, the time to build a snapshot once current, and the memory the
Observer holds (RSS growth of this process, which runs only the client side).

    python benchmarks/bench_watch.py [--jobs 100] [--pods-per-job 100]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from sandbox_process import sandbox_process

from burst.clock import SystemClock
from burst.kube.observe import Observer


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--pods-per-job", type=int, default=100)
    args = parser.parse_args()
    with sandbox_process() as url:
        run(url, args.jobs, args.pods_per_job)


def run(url: str, jobs: int, per_job: int) -> None:
    config = client.Configuration(host=url)
    config.connection_pool_maxsize = 8
    api = client.ApiClient(config)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    before = rss_mib()
    observer = Observer(api, SystemClock()).start()
    assert observer.wait_synced()
    owners = []
    for j in range(jobs):
        job = batch.create_namespaced_job(
            "default",
            {
                "metadata": {"name": f"train-{j:03d}", "labels": {"burst.dev/burstable": "true"}},
                "spec": {
                    "managedBy": "bench.example.org/pods",
                    "parallelism": per_job,
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
        )
        owners.append(job)

    def make(i: int) -> None:
        job = owners[i // per_job]
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {
                    "name": f"{job.metadata.name}-{i % per_job:03d}",
                    "labels": {"job-name": job.metadata.name},
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": job.metadata.name,
                            "uid": job.metadata.uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "containers": [
                        {
                            "name": "t",
                            "image": "registry.cern.ch/t:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
            _preload_content=False,
        ).read()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(make, range(jobs * per_job)))
    created = time.perf_counter()

    def complete() -> bool:
        return len(observer.workloads()) == jobs and all(
            any(
                c.get("reason") == "Unschedulable"
                for c in (p.get("status") or {}).get("conditions") or []
            )
            for p in list(observer.pods.items.values())
        )

    while not complete():
        time.sleep(0.05)
    done = time.perf_counter()
    t1 = time.perf_counter()
    workloads = observer.workloads()
    snapshot_s = time.perf_counter() - t1
    observer.stop()
    print(
        json.dumps(
            {
                "bench": "watch",
                "pods": jobs * per_job,
                "workloads": len(workloads),
                "create_s": round(created - t0, 2),
                "last_pod_created_to_complete_snapshot_s": round(done - created, 2),
                "snapshot_when_current_s": round(snapshot_s, 4),
                "observer_rss_growth_mib": round(rss_mib() - before),
                "relists": observer.pods.relists,
                "reconnects": observer.pods.reconnects,
            }
        ),
        flush=True,
    )
    api.close()


if __name__ == "__main__":
    main()
