"""Translating a workload for its remote cluster, and refusing what cannot be made safe."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from burst.config import Replication
from burst.kube.translate import registry_allowed, remote_name, translate

RULES = Replication(
    image_registries=["registry.cern.ch", "docker.io/pytorch"],
    secrets=["wandb-api-key"],
    config_maps=["training-config"],
)


def job(**pod_spec: Any) -> dict[str, Any]:
    spec = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "registry.cern.ch/ml/train:3",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    }
    spec.update(pod_spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "higgs-train",
            "namespace": "cms-ml",
            "uid": "0f9c2c3e-1111-2222-3333-444455556666",
            "resourceVersion": "77",
            "labels": {"burst.dev/burstable": "true", "job-name": "higgs-train"},
        },
        "spec": {
            "suspend": True,
            "selector": {"matchLabels": {"controller-uid": "x"}},
            "template": {
                "metadata": {"labels": {"controller-uid": "x", "app": "higgs"}},
                "spec": spec,
            },
        },
    }


def run(obj: dict[str, Any]) -> Any:
    return translate(
        obj,
        pool="aws-euc1-p3-od-1",
        remote_namespace="burst-cms-ml",
        installation="site-a",
        rules=RULES,
    )


def test_a_clean_job_is_pinned_labelled_and_renamed() -> None:
    t = run(job(nodeSelector={"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB", "zone": "b"}))
    assert t.safe, t.refusals
    remote = t.remote
    assert (
        remote["metadata"]["name"]
        == "higgs-train-0f9c2c3e"
        == remote_name("higgs-train", "0f9c2c3e-1111")
    )
    assert remote["metadata"]["namespace"] == "burst-cms-ml"
    assert (
        remote["metadata"]["labels"]["burst.dev/origin-uid"]
        == "0f9c2c3e-1111-2222-3333-444455556666"
    )
    assert remote["metadata"]["annotations"]["burst.dev/origin"] == "cms-ml/higgs-train"
    assert "uid" not in remote["metadata"] and "resourceVersion" not in remote["metadata"]
    assert remote["spec"]["suspend"] is False and "selector" not in remote["spec"]
    pod = remote["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"zone": "b", "burst.dev/pool": "aws-euc1-p3-od-1"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]
    assert pod["metadata"]["labels"] == {"app": "higgs"}
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_allowed_secret_and_config_map_are_listed_for_copying() -> None:
    t = run(
        job(
            volumes=[{"name": "cfg", "configMap": {"name": "training-config"}}],
            containers=[
                {
                    "name": "train",
                    "image": "docker.io/pytorch/pytorch:2.4",
                    "env": [
                        {
                            "name": "WANDB",
                            "valueFrom": {"secretKeyRef": {"name": "wandb-api-key", "key": "k"}},
                        }
                    ],
                }
            ],
        )
    )
    assert t.safe and t.secrets == ["wandb-api-key"] and t.config_maps == ["training-config"]


def _container(**fields: Any) -> list[dict[str, Any]]:
    return [{"name": "train", "image": "registry.cern.ch/ml/train:3", **fields}]


HOSTILE = [
    (
        "privileged",
        job(containers=_container(securityContext={"privileged": True})),
        "container train: privileged containers are not allowed",
    ),
    (
        "hostPath",
        job(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        "volume root uses hostPath",
    ),
    ("hostNetwork", job(hostNetwork=True), "hostNetwork is not allowed"),
    ("hostPID", job(hostPID=True), "hostPID is not allowed"),
    (
        "hostPort",
        job(containers=_container(ports=[{"containerPort": 80, "hostPort": 80}])),
        "hostPort is not allowed",
    ),
    (
        "capabilities",
        job(containers=_container(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})),
        "added capabilities SYS_ADMIN are not allowed",
    ),
    (
        "registry",
        job(containers=[{"name": "train", "image": "evil.example.com/miner:1"}]),
        "image evil.example.com/miner:1 is not from an allowed registry",
    ),
    (
        "docker-hub-library",
        job(containers=[{"name": "train", "image": "ubuntu:24.04"}]),
        "image ubuntu:24.04 is not from an allowed registry",
    ),
    (
        "unlisted-secret",
        job(volumes=[{"name": "creds", "secret": {"secretName": "cloud-admin-key"}}]),
        "Secret cloud-admin-key is not on the policy's allow-list",
    ),
    (
        "unlisted-secret-in-env",
        job(containers=_container(envFrom=[{"secretRef": {"name": "db-password"}}])),
        "Secret db-password is not on the policy's allow-list",
    ),
    ("token", job(automountServiceAccountToken=True), "a service-account token is mounted"),
]


@pytest.mark.parametrize(("case", "manifest", "reason"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_specs_are_refused_with_a_clear_reason(
    case: str, manifest: dict[str, Any], reason: str
) -> None:
    t = run(manifest)
    assert not t.safe
    assert any(reason in r for r in t.refusals), t.refusals


def test_every_reason_is_reported_not_only_the_first() -> None:
    t = run(
        job(
            hostNetwork=True,
            volumes=[{"name": "root", "hostPath": {"path": "/"}}],
            containers=_container(securityContext={"privileged": True}),
        )
    )
    assert len(t.refusals) == 3


def test_a_pytorchjob_has_every_replica_pinned_and_resumed() -> None:
    template = copy.deepcopy(job()["spec"]["template"])
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "namespace": "atlas-ml", "uid": "aaaa1111-0000"},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 3, "template": copy.deepcopy(template)},
            },
        },
    }
    t = run(obj)
    assert t.safe
    assert "suspend" not in t.remote["spec"]["runPolicy"]
    for replica in t.remote["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["spec"]["nodeSelector"] == {"burst.dev/pool": "aws-euc1-p3-od-1"}


def test_a_bare_pod_is_refused() -> None:
    t = run({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"}, "spec": {}})
    assert t.refusals == ["a Pod cannot burst: only Jobs and PyTorchJobs do (wrap it in a Job)"]


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("registry.cern.ch/ml/train:1", True),
        ("registry.cern.ch.evil.com/x", False),
        ("docker.io/pytorch/pytorch:2", True),
        ("pytorch/pytorch:2", True),
        ("python:3.12", False),
        ("nvcr.io/nvidia/pytorch:24.01", False),
    ],
)
def test_registry_matching(image: str, allowed: bool) -> None:
    assert registry_allowed(image, RULES.image_registries) is allowed
