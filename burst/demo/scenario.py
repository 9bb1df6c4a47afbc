"""The demo's jobs: what `burst demo` submits to its on-prem sandbox, and the short mix the crash
and failover tests use. Each job says how long its pods run on the sandbox's kubelet."""

from __future__ import annotations

from typing import Any

from burst.kube.replicate import KubeObjects

V100 = "Tesla-V100-SXM2-16GB"


def job_manifest(
    name: str,
    gpus: int,
    *,
    deadline: str | None,
    burstable: bool = True,
    seconds: int = 8,
    product: str = V100,
    **pod: Any,
) -> dict[str, Any]:
    annotations = {"burst.dev/expected-runtime": f"{seconds}s"}
    if deadline:
        annotations["burst.dev/deadline"] = deadline
    spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"nvidia.com/gpu.product": product},
        "containers": [
            {
                "name": "train",
                "image": "registry.cern.ch/ml/train:1",
                "env": [
                    {
                        "name": "WANDB_API_KEY",
                        "valueFrom": {"secretKeyRef": {"name": "wandb-api-key", "key": "k"}},
                    }
                ],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
        **pod,
    }
    return {
        "metadata": {
            "name": name,
            "labels": {"burst.dev/burstable": "true"} if burstable else {},
            "annotations": annotations,
        },
        "spec": {
            "template": {
                "metadata": {"annotations": {"sandbox.burst.dev/duration": f"{seconds}s"}},
                "spec": spec,
            }
        },
    }


def submit_quick(local: KubeObjects) -> list[tuple[str, str, str]]:
    """A short mix for the crash tests: on-prem is full, two jobs must burst, one only a cloud can run."""
    for ns in ("cms-ml", "atlas-ml"):
        local.ensure_namespace(ns)
        local.core.create_namespaced_secret(
            ns, {"metadata": {"name": "wandb-api-key"}, "stringData": {"k": "demo"}}
        )
    out = []
    for name, body in (
        ("hog-0", job_manifest("hog-0", 4, deadline=None, burstable=False, seconds=60)),
        ("hog-1", job_manifest("hog-1", 4, deadline=None, burstable=False, seconds=60)),
        ("tight-0", job_manifest("tight-0", 4, deadline="20s", seconds=4)),
        ("tight-1", job_manifest("tight-1", 2, deadline="20s", seconds=4)),
    ):
        local.batch.create_namespaced_job("cms-ml", body, _preload_content=False)
        out.append(("cms-ml", "Job", name))
    return out


def submit(local: KubeObjects) -> list[tuple[str, str, str]]:
    """The demo's jobs: (namespace, kind, name)."""
    for ns in ("cms-ml", "atlas-ml", "theory"):
        local.ensure_namespace(ns)
        local.core.create_namespaced_secret(
            ns, {"metadata": {"name": "wandb-api-key"}, "stringData": {"k": "demo"}}
        )
    jobs: list[tuple[str, dict[str, Any]]] = []
    for i in range(6):  # 24 V100 wanted, 8 on-prem: the last ones would miss their deadline
        jobs.append(("cms-ml", job_manifest(f"higgs-{i}", 4, deadline="20s")))
    jobs.append(("atlas-ml", job_manifest("loose-deadline", 4, deadline="10m")))
    jobs.append(("atlas-ml", job_manifest("not-burstable", 4, deadline="20s", burstable=False)))
    jobs.append(
        (
            "atlas-ml",
            job_manifest(
                "hostile", 4, deadline="20s", volumes=[{"name": "host", "hostPath": {"path": "/"}}]
            ),
        )
    )
    jobs.append(
        ("theory", job_manifest("over-budget", 4, deadline="30s"))
    )  # a cloud could make it; the budget says no
    out = []
    for ns, body in jobs:
        local.batch.create_namespaced_job(ns, body, _preload_content=False)
        out.append((ns, "Job", body["metadata"]["name"]))
    # No A100 on-prem: this one can only run in a cloud.
    template = job_manifest("x", 2, deadline=None, product="NVIDIA-A100-SXM4-40GB")["spec"][
        "template"
    ]
    local.custom.create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "atlas-ml",
        "pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {
                "name": "tracking-ddp",
                "labels": {"burst.dev/burstable": "true"},
                "annotations": {"burst.dev/deadline": "40s", "burst.dev/expected-runtime": "8s"},
            },
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": 3, "template": template},
                }
            },
        },
    )
    out.append(("atlas-ml", "PyTorchJob", "tracking-ddp"))
    return out
