"""The on-prem watch against a sandbox cluster, through the official client."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from kubernetes import client

from burst.clock import SystemClock
from burst.kube.events import EventRecorder
from burst.kube.observe import Observer, succeeded_in
from burst.kube.shapes import catalog_gpu
from burst.kube.watch import ResourceCache
from burst.model import OnPremNode
from burst.sandbox import Sandbox, gpu_node
from burst.sandbox.server import ApiServer
from tests.conftest import wait_for


def gpu_job(
    name: str,
    gpus: int = 1,
    *,
    burstable: bool = True,
    suspend: bool = False,
    annotations: dict[str, str] | None = None,
    product: str | None = "Tesla-V100-SXM2-16GB",
    resource: str = "nvidia.com/gpu",
    parallelism: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "registry.cern.ch/ml/train:1",
                "resources": {
                    "limits": {resource: str(gpus)},
                    "requests": {"cpu": "4", "memory": "16Gi"},
                },
            }
        ],
    }
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {
        "metadata": {
            "name": name,
            "labels": {"burst.dev/burstable": "true"} if burstable else {},
            "annotations": annotations or {},
        },
        "spec": {
            "suspend": suspend,
            "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": {"sandbox.burst.dev/duration": "1h"}},
                "spec": spec,
            },
        },
    }


def observer(kube: Any) -> Observer:
    events = EventRecorder(kube, SystemClock())
    return Observer(kube, SystemClock(), events, watch_timeout=5).start()


def test_pending_gpu_workloads_and_on_prem_capacity(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("v100-0", "Tesla-V100-SXM2-16GB", gpus=4))
    cordoned = gpu_node("v100-1", "Tesla-V100-SXM2-16GB", gpus=4)
    cordoned.setdefault("spec", {})["unschedulable"] = (
        True  # `kubectl cordon`: no new pod lands there
    )
    core.create_node(cordoned)
    core.create_namespace({"metadata": {"name": "cms-ml", "labels": {"burst.dev/team": "cms"}}})
    batch.create_namespaced_job("cms-ml", gpu_job("fits", gpus=4))  # runs on-prem
    batch.create_namespaced_job(
        "cms-ml", gpu_job("waits", gpus=2, annotations={"burst.dev/deadline": "6h"})
    )
    batch.create_namespaced_job("cms-ml", gpu_job("held", gpus=1, suspend=True))
    batch.create_namespaced_job("cms-ml", gpu_job("cpu-only", gpus=0, product=None))
    watch = observer(kube)
    try:
        assert watch.wait_synced()
        pending = wait_for(
            lambda: {w.name: w for w in watch.workloads()} if len(watch.workloads()) == 2 else None
        )
        waits = pending["waits"]
        assert (waits.accelerator, waits.gpus_per_pod, waits.pods, waits.team) == (
            "V100",
            2,
            1,
            "cms",
        )
        assert waits.deadline == waits.created + timedelta(hours=6) and waits.cpu_per_pod == 4
        assert pending["held"].burstable and not pending["held"].quota_blocked
        onprem = wait_for(lambda: (o := watch.onprem()).running and o)
        assert onprem.capacity == {"V100": 4}  # the cordoned node's GPUs take no new pod
        assert onprem.nodes == (OnPremNode("v100-0", "V100", 4),)
        assert [(r.accelerator, r.gpus, r.node) for r in onprem.running] == [("V100", 4, "v100-0")]
    finally:
        watch.stop()


def test_a_deleted_job_and_its_pods_leave_nothing_behind_in_the_watch(kube: Any) -> None:
    """A service that runs for months sees every job once: what it keeps of a job whose pods
    and Job are gone must go with them (the memory soak found a set per job left behind)."""
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("v100-0", "Tesla-V100-SXM2-16GB", gpus=4))
    watch = observer(kube)
    try:
        assert watch.wait_synced()
        body = gpu_job("brief")
        body["spec"]["template"]["metadata"]["annotations"]["sandbox.burst.dev/duration"] = "1s"
        body["spec"]["ttlSecondsAfterFinished"] = 0
        made = batch.create_namespaced_job("default", body)
        wait_for(lambda: made.metadata.uid in watch._pods_of)
        wait_for(lambda: not batch.list_namespaced_job("default").items, timeout=15)
        wait_for(lambda: not core.list_namespaced_pod("default").items)
        # Bookkeeping, not a public figure: the watch's per-job maps are what would grow.
        assert wait_for(lambda: not watch._pods_of and not watch._owner_of)
    finally:
        watch.stop()


def test_quota_blocked_and_mig_requests(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_namespace({"metadata": {"name": "kubeflow-user-alice"}})
    core.create_namespaced_resource_quota(
        "kubeflow-user-alice",
        {"metadata": {"name": "gpu"}, "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}},
    )
    # Alice's notebook already holds her one GPU (what the quota controller would write).
    core.patch_namespaced_resource_quota_status(
        "gpu",
        "kubeflow-user-alice",
        {
            "status": {
                "hard": {"requests.nvidia.com/gpu": "1"},
                "used": {"requests.nvidia.com/gpu": "1"},
            }
        },
    )
    batch.create_namespaced_job("kubeflow-user-alice", gpu_job("over-quota", gpus=1))
    batch.create_namespaced_job(
        "kubeflow-user-alice",
        gpu_job("mig", gpus=1, suspend=True, product=None, resource="nvidia.com/mig-1g.5gb"),
    )
    watch = observer(kube)
    try:
        found = wait_for(
            lambda: {w.name: w for w in watch.workloads()} if len(watch.workloads()) == 2 else None
        )
        assert found["over-quota"].quota_blocked
        refused = wait_for(
            lambda: [
                e
                for e in core.list_namespaced_event("kubeflow-user-alice").items
                if e.reason == "FailedCreate"
            ]
        )
        assert "exceeded quota: gpu" in refused[0].message
        assert found["mig"].accelerator == "mig-1g.5gb"
    finally:
        watch.stop()


def test_a_malformed_annotation_is_a_warning_event_not_a_crash(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    batch.create_namespaced_job(
        "default",
        gpu_job(
            "typo",
            suspend=True,
            annotations={
                "burst.dev/deadline": "tomorrow-ish",
                "burst.dev/expected-runtime": "2 hours",
            },
        ),
    )
    watch = observer(kube)
    try:
        workload = wait_for(lambda: watch.workloads())[0]
        assert workload.deadline is None and workload.expected_runtime is None
        events = wait_for(
            lambda: [
                e
                for e in core.list_namespaced_event("default").items
                if e.reason == "InvalidBurstAnnotation"
            ]
        )
        messages = sorted(e.message for e in events)
        assert messages[0].startswith("burst.dev/deadline='tomorrow-ish' is ignored")
        assert messages[1].startswith(
            "burst.dev/expected-runtime='2 hours' is ignored: bad duration"
        )
        assert all(e.type == "Warning" and e.involved_object.name == "typo" for e in events)
        watch.workloads()
        assert (
            len(
                [
                    e
                    for e in core.list_namespaced_event("default").items
                    if e.reason == "InvalidBurstAnnotation"
                ]
            )
            == 2
        )  # recorded once
    finally:
        watch.stop()


def test_the_watch_survives_compaction_and_a_dropped_connection() -> None:
    with Sandbox(history=30, controllers=False) as sandbox:
        api = client.ApiClient(client.Configuration(host=sandbox.url))
        core = client.CoreV1Api(api)
        seen: list[tuple[str, str]] = []
        cache = ResourceCache(
            "configmaps",
            core.list_config_map_for_all_namespaces,
            lambda t, o: seen.append((t, o["metadata"]["name"])),
            watch_timeout=2,
            sleep=lambda s: None,
        )
        cache.relist()
        for i in range(60):  # more events than the server keeps: the cache's version is compacted
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i:02d}"}})
        stop = threading.Event()
        thread = threading.Thread(target=cache.run, args=(stop,), daemon=True)
        thread.start()
        wait_for(lambda: len(cache.items) == 60)
        assert cache.relists == 2  # the first list, and one after 410 Expired
        # Drop the connection: the API server goes away; writes continue behind it.
        port = sandbox.server.server_address[1]
        sandbox.server.stop()
        side = ApiServer(sandbox.store, port=0)
        threading.Thread(target=side.serve_forever, daemon=True).start()
        side_core = client.CoreV1Api(client.ApiClient(client.Configuration(host=side.url)))
        side_core.delete_namespaced_config_map("c00", "default")
        side_core.create_namespaced_config_map("default", {"metadata": {"name": "late"}})
        # Stay down until the cache has noticed (the client retries a refused connection itself a
        # few times; an outage shorter than that is never seen as one).
        wait_for(lambda: cache.reconnects >= 1)
        back = ApiServer(sandbox.store, port=port)
        threading.Thread(target=back.serve_forever, daemon=True).start()
        wait_for(lambda: "late" in {o["metadata"]["name"] for o in cache.items.values()})
        names = sorted(o["metadata"]["name"] for o in cache.items.values())
        assert names == sorted([f"c{i:02d}" for i in range(1, 60)] + ["late"])
        adds = [n for t, n in seen if t == "ADDED"]
        assert len(adds) == len(set(adds))  # nothing delivered twice
        stop.set()
        back.stop()
        side.stop()
        sandbox.server = back  # already stopped; Sandbox.stop() stops it again harmlessly


def test_gpu_product_names() -> None:
    assert catalog_gpu("Tesla-V100-SXM2-16GB") == "V100"
    assert catalog_gpu("Tesla-V100-PCIE-32GB") == "V100-32GB"
    assert catalog_gpu("NVIDIA-A100-SXM4-80GB") == "A100-80GB"
    assert catalog_gpu("NVIDIA-A100-PCIE-40GB") == "A100"
    assert catalog_gpu("Tesla-T4") == "T4"
    assert catalog_gpu("NVIDIA-L4") == "L4"
    assert catalog_gpu("NVIDIA-L40S") == "L40S"
    assert catalog_gpu("Something-Else") is None


def test_a_suspended_burstable_pytorchjob_is_pending_with_all_its_pods(kube: Any) -> None:
    template = gpu_job("x", gpus=2)["spec"]["template"]
    client.CustomObjectsApi(kube).create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {
                "name": "ddp",
                "labels": {"burst.dev/burstable": "true"},
                "annotations": {"burst.dev/expected-runtime": "3h", "burst.dev/max-cost": "250"},
            },
            "spec": {
                "runPolicy": {"suspend": True},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": 3, "template": template, "restartPolicy": "Never"},
                },
            },
        },
    )
    watch = Observer(
        kube, SystemClock(), currency_for=lambda ns, labels: "CHF", watch_timeout=5
    ).start()
    try:
        (ddp,) = wait_for(lambda: watch.workloads())
        assert (ddp.kind, ddp.pods, ddp.gpus_per_pod, ddp.accelerator) == (
            "PyTorchJob",
            4,
            2,
            "V100",
        )
        assert ddp.expected_runtime == timedelta(hours=3)
        assert str(ddp.max_cost) == "250.00 CHF"
        assert ddp.fails_on_reclaim  # its workers never restart: a reclaim would fail it
    finally:
        watch.stop()


def test_runtimes_nobody_declared_are_learned_from_the_jobs_seen_to_succeed(kube: Any) -> None:
    """Three runs of `train-resnet` succeeded in 1, 2 and 3 hours (their status as the Job
    controller writes it); a fourth, pending with no runtime declared, is estimated at the p80 of
    them, and says so; one whose deadline is two hours away, at those two hours. A failed run
    teaches nothing, a declared runtime stays declared. Three of the runs of `train-vit` were
    alice's (`burst.dev/user`): her next run is estimated from hers alone, anyone else's from all
    five."""
    batch = client.BatchV1Api(kube)
    start = "2026-11-30T08:00:00Z"

    def job(name: str, user: str = "", **kwargs: Any) -> dict[str, Any]:
        made = gpu_job(name, suspend=True, **kwargs)
        if user:
            made["metadata"]["labels"]["burst.dev/user"] = user
        return made

    def finish(name: str, hours: int, ok: bool = True, user: str = "") -> None:
        batch.create_namespaced_job("default", job(name, user))
        end = f"2026-11-30T{8 + hours:02d}:00:00Z"
        conditions = ["SuccessCriteriaMet", "Complete"] if ok else ["FailureTarget", "Failed"]
        status: dict[str, Any] = {
            "conditions": [
                {"type": c, "status": "True", "lastTransitionTime": end} for c in conditions
            ],
            "startTime": start,
        }
        if ok:
            status["completionTime"] = end
        batch.patch_namespaced_job_status(name, "default", {"status": status})

    for n, hours in enumerate((1, 2, 3)):
        finish(f"train-resnet-{n}", hours)
    finish("train-resnet-9", 9, ok=False)  # failed after nine hours: not a runtime
    for n, (hours, user) in enumerate(((1, "alice"), (1, "alice"), (1, "alice"), (8, ""), (9, ""))):
        finish(f"train-vit-{n}", hours, user=user)
    batch.create_namespaced_job("default", gpu_job("train-resnet-7", suspend=True))
    batch.create_namespaced_job("default", job("train-vit-7", "alice"))
    batch.create_namespaced_job("default", job("train-vit-8", "bob"))
    due = {"burst.dev/deadline": "2h"}
    batch.create_namespaced_job("default", gpu_job("train-resnet-6", suspend=True, annotations=due))
    declared = {"burst.dev/expected-runtime": "30m"}
    batch.create_namespaced_job(
        "default", gpu_job("train-resnet-8", suspend=True, annotations=declared)
    )
    watch = observer(kube)
    try:
        assert watch.wait_synced()

        def estimated() -> dict[str, Any] | None:
            by = {w.name: w for w in watch.workloads()}
            names = ("train-resnet-6", "train-resnet-7", "train-vit-7", "train-vit-8")
            return by if all(n in by and by[n].expected_runtime for n in names) else None

        pending = wait_for(estimated)
        learned = pending["train-resnet-7"]
        assert learned.expected_runtime == timedelta(hours=3)
        assert learned.runtime_source == "learned: p80 of the last 3 runs of default/train-resnet/1"
        due_soon = pending["train-resnet-6"]
        assert due_soon.expected_runtime == timedelta(hours=2)
        assert due_soon.runtime_source == (
            "learned: p80 of the last 3 runs of default/train-resnet/1, at most the 2h to its deadline"
        )
        assert pending["train-resnet-8"].expected_runtime == timedelta(minutes=30)
        assert pending["train-resnet-8"].runtime_source == "declared"
        hers, his = pending["train-vit-7"], pending["train-vit-8"]
        assert hers.expected_runtime == timedelta(hours=1)
        assert (
            hers.runtime_source
            == "learned: p80 of the last 3 runs of default/train-vit/user alice/1"
        )
        assert his.expected_runtime == timedelta(hours=8)  # p80 of 1, 1, 1, 8, 9 hours
        assert his.runtime_source == "learned: p80 of the last 5 runs of default/train-vit/1"
        # The longest of them too, that a reuse is weighed at; nothing of the kind when declared.
        assert his.longest_runtime == timedelta(hours=9)
        assert pending["train-resnet-8"].longest_runtime is None
    finally:
        watch.stop()


def test_a_run_is_timed_from_its_first_pod_when_the_cluster_still_holds_it() -> None:
    """A Job's startTime is when its controller took it up; its pods may then wait hours to be
    scheduled (the very queue burst is for): that wait is no part of its runtime."""
    job = {
        "status": {
            "conditions": [{"type": "Complete", "status": "True"}],
            "startTime": "2026-11-30T08:00:00Z",
            "completionTime": "2026-11-30T10:00:00Z",
        }
    }
    pod = {"status": {"startTime": "2026-11-30T09:00:00Z"}}
    assert succeeded_in(job) == 7200 and succeeded_in(job, [pod]) == 3600
    assert succeeded_in(job, [{"status": {}}]) == 7200
    failed = {"status": {**job["status"], "conditions": [{"type": "Failed", "status": "True"}]}}
    assert succeeded_in(failed) is None
