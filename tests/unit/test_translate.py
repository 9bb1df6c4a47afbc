"""Translating a workload for its remote cluster, and refusing what cannot be made safe."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from burst.config import Replication
from burst.kube.translate import fails_on_reclaim, registry_allowed, remote_name, translate

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
    # On-prem node labels mean nothing on the pool's nodes: dropped, and said so.
    assert t.stripped == [
        "template.spec.nodeSelector: on-prem node labels (nvidia.com/gpu.product, zone)"
    ]
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
    assert pod["spec"]["nodeSelector"] == {"burst.dev/pool": "aws-euc1-p3-od-1"}
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
        "(container train): privileged containers are not allowed",
    ),
    (
        "hostPath",
        job(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        "template.spec.volumes[0] (root): hostPath volumes are not allowed",
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


SECRET_REF = {"name": "cloud-admin-key"}
ALLOW_LIST = [
    ("nodeName", job(nodeName="onprem-gpu-07"), "template.spec.nodeName: it names an on-prem node"),
    (
        "imagePullSecrets",
        job(imagePullSecrets=[SECRET_REF]),
        "template.spec.imagePullSecrets[0]: Secret cloud-admin-key is not on the policy's allow-list",
    ),
    (
        "csi-secret",
        job(
            volumes=[
                {
                    "name": "s3",
                    "csi": {"driver": "s3.csi.aws.com", "nodePublishSecretRef": SECRET_REF},
                }
            ]
        ),
        "template.spec.volumes[0] (s3).csi.nodePublishSecretRef: Secret cloud-admin-key is not on",
    ),
    (
        "gitRepo",
        job(volumes=[{"name": "src", "gitRepo": {"repository": "https://example.org/x.git"}}]),
        "template.spec.volumes[0] (src): gitRepo volumes are not allowed (CVE-2024-10220)",
    ),
    (
        "nfs",
        job(volumes=[{"name": "data", "nfs": {"server": "nfs.cern.ch", "path": "/eos"}}]),
        "template.spec.volumes[0] (data): nfs volumes are not allowed",
    ),
    (
        "system-priority",
        job(priorityClassName="system-node-critical"),
        "template.spec.priorityClassName: system-node-critical is for cluster components",
    ),
    (
        "schedulerName",
        job(schedulerName="volcano"),
        "template.spec.schedulerName: volcano does not run there",
    ),
    (
        "runtimeClassName",
        job(runtimeClassName="nvidia-privileged"),
        "template.spec.runtimeClassName: runtime classes are the on-prem cluster's",
    ),
    (
        "unsafe-sysctl",
        job(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}),
        "template.spec.securityContext.sysctls[0]: sysctl kernel.msgmax is not safe",
    ),
    (
        "seccomp-unconfined",
        job(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        "template.spec.securityContext.seccompProfile: Unconfined is not allowed",
    ),
    (
        "ephemeralContainers",
        job(
            ephemeralContainers=[
                {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        ),
        "template.spec.ephemeralContainers: debug containers are not sent",
    ),
    (
        "unknown-pod-field",
        job(hostPIDNamespaceTypo=True),
        "template.spec.hostPIDNamespaceTypo: not a field burst sends to a shared cluster",
    ),
    (
        "unknown-container-field",
        job(containers=_container(volumeDevices=[{"name": "raw", "devicePath": "/dev/sda"}])),
        "(container train).volumeDevices: not a field burst sends to a shared cluster",
    ),
    (
        "probe-host",
        job(containers=_container(livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}})),
        "(container train).livenessProbe.httpGet.host: probing another host is not allowed",
    ),
]


@pytest.mark.parametrize(("case", "manifest", "reason"), ALLOW_LIST, ids=[a[0] for a in ALLOW_LIST])
def test_the_allow_list_refuses_what_it_does_not_know_naming_the_path(
    case: str, manifest: dict[str, Any], reason: str
) -> None:
    t = run(manifest)
    assert not t.safe
    assert any(reason in r for r in t.refusals), t.refusals


def test_what_is_safe_to_drop_is_dropped_and_said() -> None:
    t = run(
        job(
            tolerations=[{"operator": "Exists"}, {"key": "site", "operator": "Exists"}],
            priorityClassName="cms-high",
            topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone"}],
        )
    )
    assert t.safe, t.refusals
    pod = t.remote["spec"]["template"]["spec"]
    assert {"operator": "Exists"} not in pod["tolerations"]  # a catch-all would tolerate anything
    assert {"key": "site", "operator": "Exists"} in pod["tolerations"]
    assert "priorityClassName" not in pod and "topologySpreadConstraints" not in pod
    assert len(t.stripped) == 3


def test_kueue_and_the_users_ttl_stay_on_prem() -> None:
    manifest = job()
    manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "cms-queue"
    manifest["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "main"
    manifest["spec"]["ttlSecondsAfterFinished"] = 0
    t = run(manifest)
    assert t.safe, t.refusals
    labels = {
        **t.remote["metadata"]["labels"],
        **t.remote["spec"]["template"]["metadata"]["labels"],
    }
    assert not [k for k in labels if k.startswith("kueue.x-k8s.io/")]
    assert "ttlSecondsAfterFinished" not in t.remote["spec"]


def test_an_allow_listed_pull_secret_is_copied() -> None:
    t = run(job(imagePullSecrets=[{"name": "wandb-api-key"}]))
    assert t.safe and t.secrets == ["wandb-api-key"]


def test_a_copy_ignores_disruptions_ahead_of_the_users_own_rules_where_the_api_allows() -> None:
    """A reclaimed spot node fails its pods (pod GC marks them DisruptionTarget), and each counted
    against the user's backoffLimit: enough reclaims failed a job that had done nothing wrong.
    The copy's pod failure policy ignores them first; where the API server refuses a policy
    (restartPolicy OnFailure) the copy has none. A Job read back from a 1.29+ server without a
    policy carries podReplacementPolicy TerminatingOrFailed, which a policy does not allow: its
    copy replaces a pod once it has failed."""
    ignore = {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert run(job()).remote["spec"]["podFailurePolicy"] == {"rules": [ignore]}
    own = job()
    fail = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    own["spec"]["podFailurePolicy"] = {"rules": [fail]}
    assert run(own).remote["spec"]["podFailurePolicy"] == {"rules": [ignore, fail]}
    assert own["spec"]["podFailurePolicy"] == {"rules": [fail]}  # the user's object untouched
    assert "podFailurePolicy" not in run(job(restartPolicy="OnFailure")).remote["spec"]
    replacing = job()
    replacing["spec"]["podReplacementPolicy"] = "TerminatingOrFailed"
    copied = run(replacing).remote["spec"]
    assert copied["podFailurePolicy"] == {"rules": [ignore]}
    assert copied["podReplacementPolicy"] == "Failed"
    assert replacing["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"  # untouched


def pytorchjob(policies: dict[str, str | None], run_policy: dict[str, Any]) -> dict[str, Any]:
    template = job()["spec"]["template"]
    replicas = {
        name: {"replicas": 1, "template": copy.deepcopy(template)}
        | ({"restartPolicy": policy} if policy else {})
        for name, policy in policies.items()
    }
    return {
        "kind": "PyTorchJob",
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": replicas},
    }


def test_a_job_a_lost_node_would_fail_is_known() -> None:
    """A reclaimed node fails its pods. The training operator fails a PyTorchJob on a failed pod
    of a Never replica, and makes it again under OnFailure (its default), Always and ExitCode (a
    lost node's pod has no exit code, taken as retryable); a backoffLimit of 0 fails on the first.
    A Job's copy ignores disruptions where the API server allows a pod failure policy; where it
    does not, a backoffLimit of 0 fails it too."""
    assert fails_on_reclaim(pytorchjob({"Master": None, "Worker": "Never"}, {}))
    assert not fails_on_reclaim(pytorchjob({"Master": None, "Worker": "OnFailure"}, {}))
    assert not fails_on_reclaim(pytorchjob({"Master": "ExitCode"}, {"backoffLimit": 3}))
    assert fails_on_reclaim(pytorchjob({"Master": "OnFailure"}, {"backoffLimit": 0}))
    never = job()
    never["spec"]["backoffLimit"] = 0
    assert not fails_on_reclaim(never)  # its copy ignores disruptions
    never["spec"]["podReplacementPolicy"] = "TerminatingOrFailed"  # as a 1.29+ server reads it
    assert not fails_on_reclaim(never)
    on_failure = job(restartPolicy="OnFailure")
    assert not fails_on_reclaim(on_failure)  # the default backoffLimit, 6, absorbs a reclaim
    on_failure["spec"]["backoffLimit"] = 0
    assert fails_on_reclaim(on_failure)
