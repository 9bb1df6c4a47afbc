"""The sandbox API server at scale, through the official kubernetes client.

`burst sandbox up` runs in its own process. 10,000 GPU pods are created (4 client threads), listed
in one request and in pages of 500, and a watch started before the first create must deliver every
ADDED event. The control plane runs: with no GPU nodes, the scheduler marks every pod
Unschedulable, as on a full on-prem cluster.

    python benchmarks/bench_sandbox.py [--pods 10000] [--threads 4]

Two fixes found on the way: `TCP_NODELAY` on the server's sockets (headers and body are separate
writes; with Nagle and delayed ACKs each keep-alive request waited ~40 ms), and a scheduler that
looks again only at pods that changed, not at every pod on every change.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, watch
from sandbox_process import sandbox_process


def pod(i: int) -> dict[str, object]:
    return {
        "metadata": {"name": f"pod-{i:05d}", "labels": {"app": "bench", "shard": str(i % 10)}},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example.org/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    pods, threads = args.pods, args.threads
    # The API server runs in its own process, as `burst sandbox up` does, so that the client's
    # threads and the server do not share one interpreter lock.
    with sandbox_process() as url:
        run(url, pods, threads)


def run(url: str, pods: int, threads: int) -> None:
    config = client.Configuration(host=url)
    config.connection_pool_maxsize = threads + 2
    api = client.ApiClient(config)
    core = client.CoreV1Api(api)
    start_rv = core.list_namespaced_pod("default").metadata.resource_version
    seen = threading.Event()
    added: list[float] = []

    def follow() -> None:
        w = watch.Watch()
        for event in w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=start_rv,
            timeout_seconds=120,
            deserialize=False,
        ):
            if event["type"] == "ADDED":
                added.append(time.perf_counter())
                if len(added) == pods:
                    seen.set()
                    w.stop()

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        # The server's answers are read but not turned into V1Pod objects: what is measured is
        # the server; the client's model validation of 10,000 answers is the client's cost.
        list(
            pool.map(
                lambda i: core.create_namespaced_pod(
                    "default", pod(i), _preload_content=False
                ).read(),
                range(pods),
            )
        )
    created = time.perf_counter() - t0
    seen.wait(120)
    watched = (added[-1] - t0) if len(added) == pods else None
    t1 = time.perf_counter()
    items = core.list_namespaced_pod("default").items
    listed = time.perf_counter() - t1
    t2 = time.perf_counter()
    pages, token, total = 0, None, 0
    while True:
        page = core.list_namespaced_pod("default", limit=500, _continue=token)
        pages, total, token = pages + 1, total + len(page.items), page.metadata._continue
        if not token:
            break
    paged = time.perf_counter() - t2
    print(
        json.dumps(
            {
                "bench": "sandbox",
                "pods": pods,
                "client_threads": threads,
                "create_s": round(created, 2),
                "creates_per_s": round(pods / created),
                "watch_all_added_s": round(watched, 2) if watched else None,
                "watch_events": len(added),
                "list_s": round(listed, 2),
                "listed": len(items),
                "paged_list_s": round(paged, 2),
                "pages": pages,
                "paged_items": total,
            }
        ),
        flush=True,
    )
    api.close()


if __name__ == "__main__":
    main()
