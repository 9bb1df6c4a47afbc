"""Replicate burstable workloads from an on-prem sandbox to a remote sandbox, run them there,
mirror their status back and clean up, all through the official client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from burst.clock import SystemClock
from burst.config import Replication
from burst.kube.events import EventRecorder
from burst.kube.replicate import KubeObjects, Replicator
from burst.kube.sync import Syncer
from burst.sandbox import Sandbox, gpu_node
from tests.conftest import wait_for

RULES = Replication(image_registries=["registry.cern.ch"], secrets=["wandb-api-key"])
POOL = "aws-euc1-p3-8xlarge-od-1"


@pytest.fixture(scope="module")
def remote_cluster() -> Iterator[Sandbox]:
    sandbox = Sandbox(tick=0.02, default_duration=0.3, pod_failure_backoff=(0.1, 1.0)).start()
    yield sandbox
    sandbox.stop()


def pool_node() -> dict[str, Any]:
    """The pool's node, as the cloud registers it: pool label and GPU taint."""
    return gpu_node(
        "pool-node-1",
        "Tesla-V100-SXM2-16GB",
        gpus=8,
        labels={"burst.dev/pool": POOL},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )


@pytest.fixture
def remote(remote_cluster: Sandbox) -> Iterator[KubeObjects]:
    remote_cluster.reset()
    api = client.ApiClient(client.Configuration(host=remote_cluster.url))
    client.CoreV1Api(api).create_node(pool_node())
    yield KubeObjects(api)
    api.close()


def template(**extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"sandbox.burst.dev/duration": "0.3s"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"},
            "containers": [
                {
                    "name": "train",
                    "image": "registry.cern.ch/ml/train:1",
                    "env": [
                        {
                            "name": "WANDB_API_KEY",
                            "valueFrom": {"secretKeyRef": {"name": "wandb-api-key", "key": "key"}},
                        }
                    ],
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
            **extra,
        },
    }


def setup_local(kube: Any) -> KubeObjects:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": "cms-ml"}})
    core.create_namespaced_secret(
        "cms-ml", {"metadata": {"name": "wandb-api-key"}, "stringData": {"key": "k-1"}}
    )
    core.create_namespaced_secret(
        "cms-ml", {"metadata": {"name": "grid-proxy"}, "stringData": {"p": "x"}}
    )
    return KubeObjects(kube)


def run_to_completion(
    local: KubeObjects, kind: str, name: str, syncer: Syncer, remote: KubeObjects, remote_name: str
) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        obj = local.read(kind, "cms-ml", name)
        assert obj is not None
        update = syncer.sync(obj, remote, "burst-cms-ml", remote_name, f"sim-aws/{POOL}")
        return obj if update.finished else None

    wait_for(finished, timeout=20, every=0.1)
    final = local.read(kind, "cms-ml", name)
    assert final is not None
    return final


def test_a_job_bursts_runs_remotely_and_comes_back(kube: Any, remote: KubeObjects) -> None:
    local = setup_local(kube)
    client.BatchV1Api(kube).create_namespaced_job(
        "cms-ml",
        {
            "metadata": {"name": "higgs", "labels": {"burst.dev/burstable": "true"}},
            "spec": {"template": template()},
        },
    )
    job = local.read("Job", "cms-ml", "higgs")
    assert job is not None
    events = EventRecorder(kube, SystemClock())
    result = Replicator(local, events, "site-a").dispatch(
        job, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
    )
    assert result.outcome == "dispatched", result.reasons
    assert local.read("Job", "cms-ml", "higgs")["spec"]["suspend"] is True  # type: ignore[index]
    copy = remote.read("Job", "burst-cms-ml", result.remote_name)
    assert (
        copy is not None
        and copy["metadata"]["labels"]["burst.dev/origin-uid"] == job["metadata"]["uid"]
    )
    assert remote.read("Secret", "burst-cms-ml", "wandb-api-key") is not None
    assert (
        remote.read("Secret", "burst-cms-ml", "grid-proxy") is None
    )  # only what the policy allows
    syncer = Syncer(local, events, SystemClock(), "site-a")
    final = run_to_completion(local, "Job", "higgs", syncer, remote, result.remote_name)
    assert [c["type"] for c in final["status"]["conditions"] if c["status"] == "True"][
        -1
    ] == "Complete"
    assert final["metadata"]["annotations"]["burst.dev/placement"] == f"sim-aws/{POOL}"
    wait_for(lambda: remote.read("Job", "burst-cms-ml", result.remote_name) is None)
    remote_pods = remote.core.list_namespaced_pod("burst-cms-ml").items
    wait_for(
        lambda: not remote.core.list_namespaced_pod("burst-cms-ml").items
    )  # background propagation
    del remote_pods
    reasons = {e.reason for e in client.CoreV1Api(kube).list_namespaced_event("cms-ml").items}
    assert {"Burst", "BurstFinished"} <= reasons
    assert not local.pods_of(job)  # it never ran on-prem


def test_a_1_plus_3_pytorchjob_bursts(kube: Any, remote: KubeObjects) -> None:
    local = setup_local(kube)
    client.CustomObjectsApi(kube).create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "cms-ml",
        "pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "labels": {"burst.dev/burstable": "true"}},
            "spec": {
                "runPolicy": {"suspend": True},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template()},
                    "Worker": {"replicas": 3, "template": template()},
                },
            },
        },
    )
    obj = local.read("PyTorchJob", "cms-ml", "ddp")
    assert obj is not None
    events = EventRecorder(kube, SystemClock())
    result = Replicator(local, events, "site-a").dispatch(
        obj, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
    )
    assert result.outcome == "dispatched", result.reasons
    final = run_to_completion(
        local,
        "PyTorchJob",
        "ddp",
        Syncer(local, events, SystemClock(), "site-a"),
        remote,
        result.remote_name,
    )
    assert any(
        c["type"] == "Succeeded" and c["status"] == "True" for c in final["status"]["conditions"]
    )
    assert final["status"]["replicaStatuses"]["Worker"]["succeeded"] == 3


def test_a_same_named_remote_job_that_is_not_ours_is_left_alone(
    kube: Any, remote: KubeObjects
) -> None:
    local = setup_local(kube)
    client.BatchV1Api(kube).create_namespaced_job(
        "cms-ml",
        {
            "metadata": {"name": "clash", "labels": {"burst.dev/burstable": "true"}},
            "spec": {"template": template()},
        },
    )
    job = local.read("Job", "cms-ml", "clash")
    assert job is not None
    from burst.kube.translate import remote_name

    name = remote_name("clash", job["metadata"]["uid"])
    remote.ensure_namespace("burst-cms-ml")
    remote.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "burst-cms-ml"},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "x", "image": "busybox"}],
                    }
                },
            },
        }
    )
    result = Replicator(local, EventRecorder(kube, SystemClock()), "site-a").dispatch(
        job, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
    )
    assert result.outcome == "refused"
    assert "that burst did not create" in result.reasons[0]
    untouched = remote.read("Job", "burst-cms-ml", name)
    assert untouched is not None and "burst.dev/origin-uid" not in (
        untouched["metadata"].get("labels") or {}
    )


def test_hostile_spec_is_refused_with_an_event_and_nothing_is_sent(
    kube: Any, remote: KubeObjects
) -> None:
    local = setup_local(kube)
    client.BatchV1Api(kube).create_namespaced_job(
        "cms-ml",
        {
            "metadata": {"name": "sneaky", "labels": {"burst.dev/burstable": "true"}},
            "spec": {
                "template": template(
                    hostNetwork=True,
                    volumes=[{"name": "proxy", "secret": {"secretName": "grid-proxy"}}],
                )
            },
        },
    )
    job = local.read("Job", "cms-ml", "sneaky")
    assert job is not None
    result = Replicator(local, EventRecorder(kube, SystemClock()), "site-a").dispatch(
        job, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
    )
    assert result.outcome == "refused" and len(result.reasons) == 2
    event = next(
        e
        for e in client.CoreV1Api(kube).list_namespaced_event("cms-ml").items
        if e.reason == "BurstRefused"
    )
    assert "hostNetwork is not allowed" in event.message and "Secret grid-proxy" in event.message
    assert event.type == "Warning"
    assert remote.read("Job", "burst-cms-ml", result.remote_name) is None
    assert local.read("Job", "cms-ml", "sneaky")["spec"]["suspend"] is False  # type: ignore[index]


def test_a_job_that_started_on_prem_is_not_dispatched(kube: Any, remote: KubeObjects) -> None:
    local = setup_local(kube)
    client.CoreV1Api(kube).create_node(gpu_node("onprem-v100", "Tesla-V100-SXM2-16GB", gpus=4))
    client.BatchV1Api(kube).create_namespaced_job(
        "cms-ml",
        {
            "metadata": {"name": "lucky", "labels": {"burst.dev/burstable": "true"}},
            "spec": {
                "template": {
                    **template(),
                    "metadata": {"annotations": {"sandbox.burst.dev/duration": "1h"}},
                }
            },
        },
    )
    job = local.read("Job", "cms-ml", "lucky")
    assert job is not None
    wait_for(lambda: any(p["status"].get("phase") == "Running" for p in local.pods_of(job)))
    result = Replicator(local, EventRecorder(kube, SystemClock()), "site-a").dispatch(
        job, remote, target="sim-aws", pool=POOL, remote_namespace="burst-cms-ml", rules=RULES
    )
    assert result.outcome == "started-on-prem"
    assert local.read("Job", "cms-ml", "lucky")["spec"]["suspend"] is False  # type: ignore[index]


def test_remote_copies_whose_local_workload_is_gone_are_collected(
    kube: Any, remote: KubeObjects
) -> None:
    local = setup_local(kube)
    remote.ensure_namespace("burst-cms-ml")
    remote.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "orphan-1234",
                "namespace": "burst-cms-ml",
                "labels": {"burst.dev/origin-uid": "gone", "burst.dev/installation": "site-a"},
            },
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "x", "image": "busybox"}],
                    }
                },
            },
        }
    )
    remote.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "other-site",
                "namespace": "burst-cms-ml",
                "labels": {"burst.dev/origin-uid": "gone", "burst.dev/installation": "site-b"},
            },
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "x", "image": "busybox"}],
                    }
                },
            },
        }
    )
    syncer = Syncer(local, EventRecorder(kube, SystemClock()), SystemClock(), "site-a")
    assert syncer.collect_stale(remote, active=set()) == ["burst-cms-ml/orphan-1234"]
    assert remote.read("Job", "burst-cms-ml", "other-site") is not None


def test_a_lost_remote_cluster_requeues_its_workloads(kube: Any) -> None:
    from datetime import timedelta

    from burst.clock import FakeClock
    from burst.kube.sync import RemoteHealth

    local = setup_local(kube)
    client.BatchV1Api(kube).create_namespaced_job(
        "cms-ml",
        {
            "metadata": {
                "name": "stranded",
                "labels": {"burst.dev/burstable": "true"},
                "annotations": {"burst.dev/placement": "sim-aws/pool-1"},
            },
            "spec": {"suspend": True, "template": template()},
        },
    )
    clock = FakeClock()
    health = RemoteHealth(clock, grace=timedelta(minutes=10))
    health.failed("sim-aws")
    clock.advance(timedelta(minutes=9))
    health.failed("sim-aws")  # still failing: the first failure time counts
    assert not health.lost("sim-aws")
    clock.advance(timedelta(minutes=1))
    assert health.lost("sim-aws")
    job = local.read("Job", "cms-ml", "stranded")
    assert job is not None
    Syncer(local, EventRecorder(kube, SystemClock()), clock, "site-a").requeue(
        job, "sim-aws stopped answering"
    )
    back = local.read("Job", "cms-ml", "stranded")
    assert back is not None and back["spec"]["suspend"] is False
    assert "burst.dev/placement" not in back["metadata"].get("annotations", {})
    assert any(
        e.reason == "BurstRequeued"
        for e in client.CoreV1Api(kube).list_namespaced_event("cms-ml").items
    )
    health.ok("sim-aws")
    assert not health.lost("sim-aws")
