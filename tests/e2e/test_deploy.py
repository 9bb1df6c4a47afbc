"""The deployment manifests: kustomize renders them, each has the shape the Kubernetes API
expects (the official client's models), and the RBAC is least privilege."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not on the PATH"
)
MODELS = {
    "Namespace": client.V1Namespace,
    "ServiceAccount": client.V1ServiceAccount,
    "ClusterRole": client.V1ClusterRole,
    "ClusterRoleBinding": client.V1ClusterRoleBinding,
    "Role": client.V1Role,
    "RoleBinding": client.V1RoleBinding,
    "Deployment": client.V1Deployment,
    "Service": client.V1Service,
    "ConfigMap": client.V1ConfigMap,
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "config")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return {doc["kind"]: doc for doc in yaml.safe_load_all(out) if doc}


def test_every_manifest_has_a_valid_shape(rendered: dict[str, dict[str, Any]]) -> None:
    assert set(rendered) == {*MODELS, "ServiceMonitor"}
    for kind, model in MODELS.items():
        model.model_validate(rendered[kind])
    monitor = rendered["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert all(
        doc["metadata"].get("namespace", "burst-system") == "burst-system"
        for doc in rendered.values()
    )


def test_the_deployment_runs_two_replicas_of_burst_serve(
    rendered: dict[str, dict[str, Any]],
) -> None:
    deployment = client.V1Deployment.model_validate(rendered["Deployment"])
    pod = deployment.spec.template.spec
    assert deployment.spec.replicas == 2 and pod.service_account_name == "burst"
    container = pod.containers[0]
    assert container.args[:2] == ["serve", "--config"]
    assert container.security_context.allow_privilege_escalation is False
    config = rendered["ConfigMap"]
    assert set(config["data"]) == {"burst.yaml", "policies.yaml"}


def test_rbac_is_least_privilege(rendered: dict[str, dict[str, Any]]) -> None:
    rules = rendered["ClusterRole"]["rules"]
    for rule in rules:
        assert (
            "*" not in rule["verbs"]
            and "*" not in rule["resources"]
            and "*" not in rule["apiGroups"]
        )
        assert not {"delete", "deletecollection", "escalate", "bind", "impersonate"} & set(
            rule["verbs"]
        )
    secrets = next(r for r in rules if "secrets" in r["resources"])
    assert secrets["verbs"] == ["get"]  # read the allowed ones by name; never list every Secret
    assert rendered["Role"]["rules"][0]["resources"] == ["leases"]


def test_the_database_is_one_postgresql_with_its_password_from_a_file(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Two replicas each wrote their own SQLite file (on a read-only root filesystem)."""
    service = yaml.safe_load(rendered["ConfigMap"]["data"]["burst.yaml"])
    database = service["spec"]["database"]
    assert database["url"].startswith("postgresql") and "@" in database["url"]
    assert ":" not in database["url"].split("//")[1].split("@")[0]  # no password in the URL
    pod = rendered["Deployment"]["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    folder = database["passwordFile"].rsplit("/", 1)[0]
    assert volumes[mounts[folder]]["secret"]["secretName"] == "burst-db"


def test_secret_access_is_narrowed_to_the_names_the_policies_allow(
    rendered: dict[str, dict[str, Any]],
) -> None:
    policies = [d for d in yaml.safe_load_all(rendered["ConfigMap"]["data"]["policies.yaml"]) if d]
    allowed = {"secrets": set(), "configmaps": set()}
    for p in policies:
        if p["kind"] == "BurstPolicy":
            replication = p["spec"].get("replication") or {}
            allowed["secrets"] |= set(replication.get("secrets") or [])
            allowed["configmaps"] |= set(replication.get("configMaps") or [])
    rules = rendered["ClusterRole"]["rules"]
    for resource, names in allowed.items():
        rule = next(r for r in rules if r["resources"] == [resource])
        assert rule["verbs"] == ["get"] and set(rule["resourceNames"]) == names


# Every call burst makes in a remote cluster (kube/replicate.py KubeObjects, kube/sync.py
# collect_stale, the pool readiness check): (API group, resource, verb).
REMOTE_CALLS = {
    ("", "namespaces", "create"),
    *(("batch", "jobs", v) for v in ("get", "list", "create", "delete")),
    *(("kubeflow.org", "pytorchjobs", v) for v in ("get", "list", "create", "delete")),
    *(
        ("", r, v)
        for r in ("secrets", "configmaps")
        for v in ("get", "list", "create", "patch", "delete")
    ),
    ("", "persistentvolumeclaims", "get"),
    ("", "serviceaccounts", "get"),
    ("", "nodes", "get"),
    ("", "nodes", "list"),
}


def test_the_remote_rbac_covers_every_call_and_no_more() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "config" / "remote")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    docs = {d["kind"]: d for d in yaml.safe_load_all(out) if d}
    client.V1ClusterRole.model_validate(docs["ClusterRole"])
    granted = {
        (group, resource, verb)
        for rule in docs["ClusterRole"]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == REMOTE_CALLS
