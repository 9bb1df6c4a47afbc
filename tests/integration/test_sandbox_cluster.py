"""The sandbox's simulated control plane, driven through the official client: Jobs and
PyTorchJobs run to completion on simulated GPU nodes, suspension, scheduling constraints, and
node loss."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from burst.sandbox import gpu_node
from tests.conftest import wait_for

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def pod_spec(
    gpus: int = 1, seconds: str = "0.2s", product: str | None = None, **extra: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "registry.example.org/train:1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
        **extra,
    }
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"metadata": {"annotations": {"sandbox.burst.dev/duration": seconds}}, "spec": spec}


def pod(name: str, **kwargs: Any) -> dict[str, Any]:
    body = pod_spec(**kwargs)
    body["metadata"]["name"] = name
    return body


def test_a_job_runs_to_completion_on_gpu_nodes(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("v100-0", "Tesla-V100", gpus=4))
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "train"},
            "spec": {
                "completions": 3,
                "parallelism": 2,
                "template": pod_spec(gpus=2, product="Tesla-V100"),
            },
        },
    )
    done = wait_for(
        lambda: (j := batch.read_namespaced_job("train", "default")).status.succeeded == 3 and j
    )
    assert [c.type for c in done.status.conditions if c.status == "True"] == [
        "SuccessCriteriaMet",
        "Complete",
    ]
    pods = core.list_namespaced_pod("default", label_selector="job-name=train").items
    assert len(pods) == 3 and {p.spec.node_name for p in pods} == {"v100-0"}
    assert all(p.status.phase == "Succeeded" for p in pods)
    assert all(p.status.container_statuses[0].state.terminated.exit_code == 0 for p in pods)


def test_a_failing_pod_counts_against_the_backoff_limit(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("n0"))
    template = pod_spec()
    template["metadata"]["annotations"]["sandbox.burst.dev/exit-code"] = "3"
    batch.create_namespaced_job(
        "default",
        {"metadata": {"name": "crash"}, "spec": {"backoffLimit": 1, "template": template}},
    )
    failed = wait_for(
        lambda: any(
            c.type == "Failed" and c.status == "True"
            for c in (batch.read_namespaced_job("crash", "default").status.conditions or [])
        )
    )
    assert failed
    assert batch.read_namespaced_job("crash", "default").status.failed == 2


def test_a_1_plus_3_pytorchjob_completes(kube: Any) -> None:
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    for i in range(2):
        core.create_node(gpu_node(f"a100-{i}", "NVIDIA-A100-SXM4-40GB", gpus=4))
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": pod_spec(gpus=2, seconds="0.4s"),
                },
                "Worker": {
                    "replicas": 3,
                    "restartPolicy": "OnFailure",
                    "template": pod_spec(gpus=2, seconds="0.3s"),
                },
            }
        },
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", job)

    def succeeded() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "ddp"
        )
        conditions = {
            c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions", [])
        }
        return obj if conditions.get("Succeeded") == "True" else None

    done = wait_for(succeeded)
    assert done["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    # The job succeeds with its Master (the operator's default success policy); a worker bound
    # later may still be running then, so its counts add up to 3 and its pods finish after.
    assert sum(done["status"]["replicaStatuses"]["Worker"].values()) == 3

    def all_done() -> list[Any] | None:
        found = core.list_namespaced_pod(
            "default", label_selector="training.kubeflow.org/job-name=ddp"
        ).items
        return found if all(p.status.phase == "Succeeded" for p in found) else None

    pods = wait_for(all_done)
    assert sorted(p.metadata.name for p in pods) == [
        "ddp-master-0",
        "ddp-worker-0",
        "ddp-worker-1",
        "ddp-worker-2",
    ]
    assert {p.spec.node_name for p in pods} == {"a100-0", "a100-1"}  # 8 GPUs over two 4-GPU nodes


def test_a_suspended_job_creates_no_pods_until_resumed(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("n0"))
    batch.create_namespaced_job(
        "default", {"metadata": {"name": "held"}, "spec": {"suspend": True, "template": pod_spec()}}
    )
    wait_for(
        lambda: any(
            c.type == "Suspended" and c.status == "True"
            for c in (batch.read_namespaced_job("held", "default").status.conditions or [])
        )
    )
    assert core.list_namespaced_pod("default").items == []
    batch.patch_namespaced_job("held", "default", {"spec": {"suspend": False}})
    wait_for(lambda: batch.read_namespaced_job("held", "default").status.succeeded == 1)


def test_a_job_managed_by_another_controller_is_left_alone(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("n0"))
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "elsewhere"},
            "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "template": pod_spec()},
        },
    )
    batch.create_namespaced_job(
        "default", {"metadata": {"name": "here"}, "spec": {"template": pod_spec()}}
    )
    wait_for(lambda: batch.read_namespaced_job("here", "default").status.succeeded == 1)
    assert not core.list_namespaced_pod("default", label_selector="job-name=elsewhere").items


def test_a_gpu_product_no_node_has_stays_pending_unschedulable(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    core.create_node(gpu_node("v100-0", "Tesla-V100"))
    core.create_namespaced_pod("default", pod("wants-h100", product="NVIDIA-H100-80GB-HBM3"))

    def condition() -> Any:
        found = core.read_namespaced_pod("wants-h100", "default")
        return next((c for c in found.status.conditions or [] if c.type == "PodScheduled"), None)

    scheduled = wait_for(condition)
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    assert (
        scheduled.message
        == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    )
    assert core.read_namespaced_pod("wants-h100", "default").status.phase == "Pending"


def test_scheduler_counts_gpus_and_honours_taints_and_affinity(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    core.create_node(gpu_node("tainted", gpus=8, taints=[GPU_TAINT]))
    core.create_node(gpu_node("small", gpus=1))
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["Tesla-V100-SXM2-16GB"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    core.create_namespaced_pod("default", pod("no-toleration", gpus=4, seconds="1h"))
    core.create_namespaced_pod(
        "default",
        pod("tolerates", gpus=4, seconds="1h", tolerations=TOLERATE_GPU, affinity=affinity),
    )
    wait_for(lambda: core.read_namespaced_pod("tolerates", "default").spec.node_name == "tainted")
    pending = wait_for(
        lambda: next(
            (
                c
                for c in core.read_namespaced_pod("no-toleration", "default").status.conditions
                or []
                if c.reason == "Unschedulable"
            ),
            None,
        )
    )
    assert pending.message == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_deleting_a_node_fails_its_pods_like_a_spot_interruption(kube: Any) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("spot-0"))
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "long"},
            "spec": {"backoffLimit": 0, "template": pod_spec(seconds="1h")},
        },
    )
    wait_for(
        lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod("default").items)
    )
    core.delete_node("spot-0")
    pod = wait_for(
        lambda: next(
            (p for p in core.list_namespaced_pod("default").items if p.status.phase == "Failed"),
            None,
        )
    )
    # Pod GC's mark (gcOrphaned): Failed with DisruptionTarget, its container as last seen.
    assert [(c.type, c.reason) for c in pod.status.conditions if c.type == "DisruptionTarget"] == [
        ("DisruptionTarget", "DeletionByPodGC")
    ]
    assert all(cs.state.terminated is None for cs in pod.status.container_statuses or [])
    wait_for(
        lambda: any(
            c.type == "Failed"
            for c in batch.read_namespaced_job("long", "default").status.conditions or []
        )
    )


def test_pods_run_on_the_sandbox_clock() -> None:
    # With a FakeClock, a pod runs exactly as long as the test moves the clock.
    from datetime import timedelta

    from burst.clock import FakeClock
    from burst.sandbox import Sandbox

    clock = FakeClock()
    with Sandbox(clock=clock, tick=0.01) as sandbox:
        api = client.ApiClient(client.Configuration(host=sandbox.url))
        core = client.CoreV1Api(api)
        core.create_node(gpu_node("n0"))
        core.create_namespaced_pod("default", pod("timed", seconds="10m"))
        wait_for(lambda: core.read_namespaced_pod("timed", "default").status.phase == "Running")
        clock.advance(timedelta(minutes=9, seconds=59))
        assert sandbox.control is not None
        sandbox.control.settle()
        assert core.read_namespaced_pod("timed", "default").status.phase == "Running"
        clock.advance(timedelta(seconds=1))
        wait_for(lambda: core.read_namespaced_pod("timed", "default").status.phase == "Succeeded")
        api.close()


IGNORE_DISRUPTIONS = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


def test_a_disruption_ignored_by_the_jobs_pod_failure_policy_is_not_counted(kube: Any) -> None:
    """Pod GC fails the pods of a deleted node with DisruptionTarget (reason DeletionByPodGC;
    kubernetes pkg/controller/podgc/gc_controller.go gcOrphaned), and a podFailurePolicy rule
    that ignores it keeps the failure out of backoffLimit (pkg/controller/job/
    pod_failure_policy.go matchPodFailurePolicy): the Job makes another pod, which runs when a
    node comes. Without the rule, backoffLimit 0 fails the Job (the test above)."""
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("spot-1"))
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "kept"},
            "spec": {
                "backoffLimit": 0,
                "podFailurePolicy": IGNORE_DISRUPTIONS,
                "template": pod_spec(seconds="1h"),
            },
        },
    )

    def phases() -> list[str]:
        return sorted(p.status.phase for p in core.list_namespaced_pod("default").items)

    wait_for(lambda: phases() == ["Running"])
    core.delete_node("spot-1")
    wait_for(lambda: phases() == ["Failed", "Pending"])
    (lost,) = [p for p in core.list_namespaced_pod("default").items if p.status.phase == "Failed"]
    disruption = next(c for c in lost.status.conditions if c.type == "DisruptionTarget")
    assert (disruption.status, disruption.reason) == ("True", "DeletionByPodGC")
    core.create_node(gpu_node("spot-2"))
    wait_for(lambda: phases() == ["Failed", "Running"])
    status = batch.read_namespaced_job("kept", "default").status
    assert not status.failed and not any(c.type == "Failed" for c in status.conditions or [])


def test_a_failjob_rule_fails_the_job_at_its_first_match(kube: Any) -> None:
    """An exit code a FailJob rule names fails the Job at once, whatever backoffLimit leaves
    (reason PodFailurePolicy); exit code 0 never matches an onExitCodes rule."""
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("gpu-9"))
    template = pod_spec()
    template["metadata"]["annotations"]["sandbox.burst.dev/exit-code"] = "42"
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "bad"},
            "spec": {"backoffLimit": 6, "podFailurePolicy": policy, "template": template},
        },
    )

    def failed() -> Any:
        conditions = batch.read_namespaced_job("bad", "default").status.conditions or []
        return next((c for c in conditions if c.type == "Failed"), None)

    assert wait_for(failed).reason == "PodFailurePolicy"
    assert len(core.list_namespaced_pod("default").items) == 1  # no second try
