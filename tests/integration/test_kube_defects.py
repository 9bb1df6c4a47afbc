"""burst against the strict sandbox: each defect a real cluster showed, with the test that failed
before its fix (the rules themselves are shown in test_sandbox_rules.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client

from burst.clock import SystemClock
from burst.kube.connect import TimedApiClient
from burst.kube.events import EventRecorder
from burst.kube.replicate import KubeObjects, Replicator
from burst.kube.sync import Syncer
from burst.kube.watch import ResourceCache
from burst.sandbox import Sandbox, gpu_node
from burst.sandbox.resources import BY_KIND
from tests.conftest import wait_for
from tests.integration.test_replicate_sync import (
    POOL,
    RULES,
    remote,
    remote_cluster,
    run_to_completion,
    setup_local,
    template,
)
from tests.integration.test_watch import gpu_job, observer

__all__ = ["remote", "remote_cluster"]  # fixtures shared with test_replicate_sync


def test_a_pending_job_that_exists_before_the_watch_starts_is_seen(
    kube: Any,
) -> None:
    """List items have no kind: the watch knows it from the list, it does not crash on it."""
    client.CoreV1Api(kube).create_node(gpu_node("gpu-0", "Tesla-V100-SXM2-16GB", 4))
    client.BatchV1Api(kube).create_namespaced_job("default", gpu_job("early", 8))
    obs = observer(kube)
    try:
        assert obs.wait_synced(10)
        found = wait_for(lambda: [w for w in obs.workloads() if w.name == "early"])
        assert found[0].kind == "Job"
    finally:
        obs.stop()


def burst_job(kube: Any, name: str, **spec: Any) -> tuple[KubeObjects, dict[str, Any]]:
    local = setup_local(kube)
    body = {
        "metadata": {"name": name, "labels": {"burst.dev/burstable": "true"}},
        "spec": {"template": template(), **spec},
    }
    client.BatchV1Api(kube).create_namespaced_job("cms-ml", body)
    job = local.read("Job", "cms-ml", name)
    assert job is not None
    return local, job


def dispatch(kube: Any, local: KubeObjects, job: dict[str, Any], remote: KubeObjects) -> str:
    events = EventRecorder(kube, SystemClock())
    result = Replicator(local, events, "site-a").dispatch(
        job, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
    )
    assert result.outcome == "dispatched", result.reasons
    return result.remote_name


def test_a_failed_remote_copy_is_mirrored_as_a_132_server_accepts_it(
    kube: Any, remote: KubeObjects
) -> None:
    """Failed needs FailureTarget and no completionTime on 1.32+: the old mirror wrote Failed with
    a completionTime and the local server refused it, so the job stayed suspended for ever."""
    failing = template()
    failing["metadata"]["annotations"]["sandbox.burst.dev/exit-code"] = "1"
    local, job = burst_job(kube, "doomed", backoffLimit=0, template=failing)
    name = dispatch(kube, local, job, remote)
    syncer = Syncer(local, EventRecorder(kube, SystemClock()), SystemClock(), "site-a")
    final = run_to_completion(local, "Job", "doomed", syncer, remote, name)
    true = {c["type"] for c in final["status"]["conditions"] if c["status"] == "True"}
    assert {"FailureTarget", "Failed"} <= true and "completionTime" not in final["status"]


def test_the_users_ttl_does_not_reach_the_copy(kube: Any, remote: KubeObjects) -> None:
    """A copy deleted by its own ttlSecondsAfterFinished before sync saw it finish would leave
    the local job suspended and the pool billing: the copy keeps no TTL of the user's."""
    local, job = burst_job(kube, "brief", ttlSecondsAfterFinished=0)
    name = dispatch(kube, local, job, remote)
    copy = remote.read("Job", "burst-cms-ml", name)
    assert copy is not None and "ttlSecondsAfterFinished" not in copy["spec"]
    syncer = Syncer(local, EventRecorder(kube, SystemClock()), SystemClock(), "site-a")

    def outcome() -> str | None:
        obj = local.read("Job", "cms-ml", "brief")
        assert obj is not None  # the user's TTL counts from the outcome burst mirrors
        return syncer.sync(obj, remote, "burst-cms-ml", name, f"sim-aws/{POOL}").finished

    assert wait_for(outcome, timeout=20, every=0.1) == "succeeded"
    # Then the user's TTL applies to the user's job, as the user asked.
    wait_for(lambda: local.read("Job", "cms-ml", "brief") is None)


def test_a_pytorchjob_whose_operator_cannot_suspend_it_is_refused_not_run_twice(
    remote: KubeObjects,
) -> None:
    """On a training operator older than v1.7 runPolicy.suspend is pruned: the local job kept
    running while its copy ran in the cloud. Read back, it is refused with the reason instead."""
    with Sandbox(training_operator="v1.6", tick=0.02) as old:
        api = client.ApiClient(client.Configuration(host=old.url))
        local = setup_local(api)
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            "cms-ml",
            "pytorchjobs",
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "ddp", "labels": {"burst.dev/burstable": "true"}},
                "spec": {
                    "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template()}}
                },
            },
        )
        obj = local.read("PyTorchJob", "cms-ml", "ddp")
        assert obj is not None
        events = EventRecorder(api, SystemClock())
        result = Replicator(local, events, "site-a").dispatch(
            obj, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
        )
        assert result.outcome == "refused"
        assert "runPolicy.suspend needs kubeflow/training-operator v1.7" in result.reasons[0]
        assert remote.read("PyTorchJob", "burst-cms-ml", result.remote_name) is None
        warned = client.CoreV1Api(api).list_namespaced_event("cms-ml").items
        assert any(e.reason == "BurstRefused" for e in warned)
        api.close()


def test_a_frozen_api_server_does_not_freeze_burst() -> None:
    """No Kubernetes call waited with a deadline: a half-open connection froze the watch for ever.
    Every call now has one; a watch that hears nothing reconnects, and catches up once the
    server answers again."""
    with Sandbox(controllers=False) as cluster:
        api = TimedApiClient(client.Configuration(host=cluster.url), timeout=(1.0, 1.0))
        core = client.CoreV1Api(api)
        seen: list[str] = []
        cache = ResourceCache(
            "configmaps",
            lambda **kw: core.list_namespaced_config_map("default", **kw),
            lambda type_, obj: seen.append(obj["metadata"]["name"]),
            kind="ConfigMap",
            api_version="v1",
            watch_timeout=1,
            sleep=lambda s: None,
        )
        stop = threading.Event()
        threading.Thread(target=cache.run, args=(stop,), daemon=True).start()
        assert cache.synced.wait(30)
        cluster.freeze()
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.MaxRetryError) as hung:  # after urllib3's retries
            KubeObjects(api).read("ConfigMap", "default", "any")
        assert isinstance(hung.value.reason, urllib3.exceptions.ReadTimeoutError)
        # It gave up (4 tries of 1 s here) rather than waiting for ever; a generous bound, as a
        # busy machine adds to each try.
        assert time.monotonic() - started < 60
        wait_for(lambda: cache.reconnects >= 1, timeout=30)  # the silent watch gave up
        cluster.thaw()
        core.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
        wait_for(lambda: "after" in seen, timeout=30)
        stop.set()
        api.close()


def test_a_relist_pages_and_starts_again_when_its_snapshot_expires() -> None:
    """Cluster-wide relists asked for everything at once and kept managedFields: now they page,
    restart on 410 Expired, and the cache keeps objects without managedFields."""
    with Sandbox(controllers=False) as cluster:
        api = client.ApiClient(client.Configuration(host=cluster.url))
        core = client.CoreV1Api(api)
        for i in range(1203):
            cluster.store.create(
                BY_KIND["ConfigMap"], "default", {"metadata": {"name": f"c{i:04d}"}}
            )
        pages: list[int] = []

        def listing(**kw: Any) -> Any:
            if kw.get("_continue") and len(pages) == 1:
                cluster.store.create(BY_KIND["ConfigMap"], "default", {"metadata": {"name": "x"}})
                cluster.store.compact()  # the first page's snapshot is gone: start again
            pages.append(kw.get("limit", 0))
            return core.list_namespaced_config_map("default", **kw)

        cache = ResourceCache(
            "configmaps", listing, lambda *_: None, kind="ConfigMap", api_version="v1"
        )
        cache.relist()
        assert len(cache.items) == 1204  # all 1,203 and the one made while it paged
        assert all(limit == 500 for limit in pages) and len(pages) == 2 + 3  # expired, again
        assert all("managedFields" not in o["metadata"] for o in cache.items.values())
        api.close()


def test_a_deadline_before_creation_and_a_negative_cap_are_warned_not_used(kube: Any) -> None:
    """Such values were used, or ignored without a word: each is now a Warning Event."""
    core = client.CoreV1Api(kube)
    client.BatchV1Api(kube).create_namespaced_job(
        "default",
        gpu_job(
            "odd",
            suspend=True,
            annotations={
                "burst.dev/deadline": "2001-01-01T00:00:00Z",
                "burst.dev/max-cost": "-3",
                "burst.dev/expected-runtime": "0s",
            },
        ),
    )
    obs = observer(kube)
    try:
        workload = wait_for(lambda: obs.workloads())[0]
        assert (workload.deadline, workload.max_cost, workload.expected_runtime) == (
            None,
            None,
            None,
        )
        messages = wait_for(
            lambda: (
                sorted(
                    e.message
                    for e in core.list_namespaced_event("default").items
                    if e.reason == "InvalidBurstAnnotation"
                )
                if len(core.list_namespaced_event("default").items) >= 3
                else None
            )
        )
        assert "it is before the job was created" in messages[0]
        assert "a runtime is longer than nothing" in messages[1]
        assert "a cost cap cannot be negative" in messages[2]
    finally:
        obs.stop()


def test_every_quota_of_the_namespace_blocks_not_only_gpu_ones(kube: Any) -> None:
    """Only GPU quotas were read: a Kubeflow profile's CPU quota, and any quota the job's
    FailedCreate events name (here ephemeral storage, which burst does not model), held jobs back
    unseen."""
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_namespace({"metadata": {"name": "kubeflow-user-bob"}})
    for name, hard in (
        ("cpu", {"requests.cpu": "2"}),
        ("disk", {"requests.ephemeral-storage": "1Gi"}),
    ):
        core.create_namespaced_resource_quota(
            "kubeflow-user-bob", {"metadata": {"name": name}, "spec": {"hard": hard}}
        )
    batch.create_namespaced_job("kubeflow-user-bob", gpu_job("cpu-hungry", gpus=1))  # 4 CPUs
    disk = gpu_job("disk-hungry", gpus=1)
    container = disk["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"] = {"cpu": "1", "ephemeral-storage": "10Gi"}
    batch.create_namespaced_job("kubeflow-user-bob", disk)
    obs = observer(kube)
    try:
        found = wait_for(
            lambda: {w.name: w for w in obs.workloads()} if len(obs.workloads()) == 2 else None
        )
        assert found["cpu-hungry"].quota_blocked and found["disk-hungry"].quota_blocked
    finally:
        obs.stop()


def test_a_kueue_queued_job_counts_as_pending_on_prem(kube: Any) -> None:
    """A job Kueue holds suspended (queue-name label, not admitted) waits on-prem for quota,
    burstable or not: it is in the queue the estimate simulates, and quota-blocked."""
    job = gpu_job("queued", gpus=2, burstable=False, suspend=True)
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "cms"
    client.BatchV1Api(kube).create_namespaced_job("default", job)
    obs = observer(kube)
    try:
        (workload,) = wait_for(lambda: obs.workloads())
        assert workload.name == "queued" and workload.quota_blocked and not workload.burstable
    finally:
        obs.stop()


def test_a_kueue_job_is_taken_from_kueue_before_its_copy_and_never_runs_twice(
    remote: KubeObjects,
) -> None:
    """A job Kueue held suspended was burst, then unsuspended by Kueue when admitted: it ran twice,
    and its copy kept the Kueue label and stayed suspended in the cloud. Now burst takes it out of
    Kueue's hands (the label goes while Kueue holds it) before the copy exists, strips Kueue's
    labels from the copy, and lets Kueue keep a job it has admitted."""
    with Sandbox(tick=0.02, kueue_quotas={"cms": 0}) as onprem:  # no room: Kueue holds them
        api = client.ApiClient(client.Configuration(host=onprem.url))
        local = setup_local(api)
        batch = client.BatchV1Api(api)
        for name in ("held", "admitted"):
            batch.create_namespaced_job(
                "cms-ml",
                {
                    "metadata": {
                        "name": name,
                        "labels": {
                            "burst.dev/burstable": "true",
                            "kueue.x-k8s.io/queue-name": "cms",
                        },
                    },
                    "spec": {"template": template()},
                },
            )
        events = EventRecorder(api, SystemClock())
        replicator = Replicator(local, events, "site-a")
        held = local.read("Job", "cms-ml", "held")
        assert held is not None and held["spec"]["suspend"] is True  # Kueue's webhook
        result = replicator.dispatch(
            held, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
        )
        assert result.outcome == "dispatched", result.reasons
        copy = remote.read("Job", "burst-cms-ml", result.remote_name)
        assert copy is not None and copy["spec"]["suspend"] is False
        assert not [k for k in copy["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")]
        onprem.store.kueue.quotas["cms"] = 8  # type: ignore[union-attr]  # room at last
        batch.patch_namespaced_job("admitted", "cms-ml", {"metadata": {"labels": {"x": "y"}}})
        wait_for(lambda: local.read("Job", "cms-ml", "admitted")["spec"]["suspend"] is False)  # type: ignore[index]
        time.sleep(0.3)
        mine = local.read("Job", "cms-ml", "held")
        assert mine is not None and mine["spec"]["suspend"] is True  # Kueue let it be
        assert "kueue.x-k8s.io/queue-name" not in mine["metadata"]["labels"]
        admitted = local.read("Job", "cms-ml", "admitted")
        assert admitted is not None
        second = replicator.dispatch(
            admitted,
            remote,
            target="sim-aws",
            pool=POOL,
            remote_namespace="burst-cms-ml",
            rules=RULES,
        )
        assert second.outcome == "started-on-prem"  # Kueue admitted it: it runs here, once
        api.close()


def test_a_copied_secret_is_brought_up_to_date_on_the_next_dispatch(
    kube: Any, remote: KubeObjects
) -> None:
    """Copied Secrets were never refreshed: a rotated key stayed old in the cloud."""
    local, first = burst_job(kube, "one")
    dispatch(kube, local, first, remote)
    assert remote.read("Secret", "burst-cms-ml", "wandb-api-key")["data"]["key"] == "ay0x"  # type: ignore[index]
    client.CoreV1Api(kube).patch_namespaced_secret(
        "wandb-api-key", "cms-ml", {"stringData": {"key": "rotated"}}
    )
    second = {
        "metadata": {"name": "two", "labels": {"burst.dev/burstable": "true"}},
        "spec": {"template": template()},
    }
    client.BatchV1Api(kube).create_namespaced_job("cms-ml", second)
    job = local.read("Job", "cms-ml", "two")
    assert job is not None
    dispatch(kube, local, job, remote)
    copied = remote.read("Secret", "burst-cms-ml", "wandb-api-key")
    assert copied is not None and copied["data"]["key"] == "cm90YXRlZA=="


def test_a_copy_runs_on_an_aks_spot_node_which_aks_taints_itself(
    kube: Any, remote: KubeObjects
) -> None:
    """AKS taints spot nodes kubernetes.azure.com/scalesetpriority=spot:NoSchedule; the copies
    tolerated only nvidia.com/gpu, so an AKS spot pool never ran a job."""
    from burst.cloud.provider import PoolSpec
    from burst.model import OfferKey
    from providers.sim import node_manifest

    spot = PoolSpec(
        name="azure-spot-pool",
        offer=OfferKey("azure", "eastus", "Standard_NC4as_T4_v3", "spot", "T4", 1),
        nodes=1,
        owner="site-a",
        policy="p",
        epoch=1,
    )
    node = node_manifest(spot, "aks-spot-0", "azure", "eastus")
    assert {
        "key": "kubernetes.azure.com/scalesetpriority",
        "value": "spot",
        "effect": "NoSchedule",
    } in node["spec"]["taints"]
    node["status"]["allocatable"]["nvidia.com/gpu"] = node["status"]["capacity"][
        "nvidia.com/gpu"
    ] = "4"
    remote.core.create_node(node)
    local, job = burst_job(kube, "spotty")
    result = Replicator(local, EventRecorder(kube, SystemClock()), "site-a").dispatch(
        job,
        remote,
        target="sim-azure",
        pool="azure-spot-pool",
        remote_namespace="burst-cms-ml",
        rules=RULES,
    )
    assert result.outcome == "dispatched"
    syncer = Syncer(local, EventRecorder(kube, SystemClock()), SystemClock(), "site-a")
    final = run_to_completion(local, "Job", "spotty", syncer, remote, result.remote_name)
    assert any(
        c["type"] == "Complete" and c["status"] == "True" for c in final["status"]["conditions"]
    )


def test_an_event_the_api_server_did_not_take_is_sent_on_the_next_look() -> None:
    """The recorder remembered an Event as sent before sending it: one the API server did not
    take (paused, run 13: four malformed jobs never told of their bad deadline) was never sent
    again. Now it is forgotten when not taken, and the next look sends it."""
    with Sandbox(controllers=False) as cluster:
        api = TimedApiClient(client.Configuration(host=cluster.url), timeout=(1.0, 1.0))
        core = client.CoreV1Api(api)
        job = {"kind": "Job", "apiVersion": "batch/v1"}
        job["metadata"] = {"namespace": "default", "name": "bad-deadline", "uid": "u-1"}
        events = EventRecorder(api, SystemClock())
        cluster.freeze()
        with pytest.raises(urllib3.exceptions.ReadTimeoutError):  # a POST is not retried
            events.record(job, "Warning", "InvalidBurstAnnotation", "bad deadline")
        cluster.thaw()
        assert events.record(job, "Warning", "InvalidBurstAnnotation", "bad deadline")
        assert not events.record(job, "Warning", "InvalidBurstAnnotation", "bad deadline")
        # The paused server took the first once it resumed: said twice, where it was never said.
        wait_for(lambda: len(core.list_namespaced_event("default").items) == 2, timeout=30)
        told = core.list_namespaced_event("default").items
        assert {e.reason for e in told} == {"InvalidBurstAnnotation"}
        api.close()
