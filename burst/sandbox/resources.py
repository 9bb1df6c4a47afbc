"""The kinds the sandbox API server serves, and the discovery documents kubectl reads first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERSION_INFO = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-burst-sandbox",
    "gitCommit": "sandbox",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool
    status: bool = False  # has a /status subresource
    builtin: bool = True  # strategic merge patch is refused for custom resources
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"


RESOURCES = [
    Resource("", "v1", "Namespace", "namespaces", False, status=True, short_names=("ns",)),
    Resource("", "v1", "Node", "nodes", False, status=True, short_names=("no",)),
    Resource("", "v1", "Pod", "pods", True, status=True, short_names=("po",)),
    Resource("", "v1", "Secret", "secrets", True),
    Resource("", "v1", "ConfigMap", "configmaps", True, short_names=("cm",)),
    Resource("", "v1", "Event", "events", True, short_names=("ev",)),
    Resource("", "v1", "ServiceAccount", "serviceaccounts", True, short_names=("sa",)),
    Resource(
        "", "v1", "ResourceQuota", "resourcequotas", True, status=True, short_names=("quota",)
    ),
    Resource(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        True,
        status=True,
        short_names=("pvc",),
    ),
    Resource(
        "scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, short_names=("pc",)
    ),
    Resource("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
    Resource("batch", "v1", "Job", "jobs", True, status=True),
    Resource("coordination.k8s.io", "v1", "Lease", "leases", True),
    Resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", True, status=True, builtin=False),
]
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KIND = {r.kind: r for r in RESOURCES}


def groups() -> dict[str, list[Resource]]:
    out: dict[str, list[Resource]] = {}
    for r in RESOURCES:
        out.setdefault(r.api_version, []).append(r)
    return out


def resource_list(api_version: str) -> dict[str, Any] | None:
    found = groups().get(api_version)
    if found is None:
        return None
    items: list[dict[str, Any]] = []
    for r in found:
        items.append(
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
                "shortNames": list(r.short_names),
            }
        )
        if r.status:
            items.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if r.kind == "Pod":
            items.append(
                {
                    "name": "pods/binding",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": api_version,
        "resources": items,
    }


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def api_group_list() -> dict[str, Any]:
    out = []
    for api_version in groups():
        if "/" not in api_version:
            continue
        group, version = api_version.split("/")
        gv = {"groupVersion": api_version, "version": version}
        out.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}


def openapi_v3_root() -> dict[str, Any]:
    """The OpenAPI v3 index kubectl reads before it validates a manifest."""
    paths = {}
    for api_version in groups():
        prefix = "api" if "/" not in api_version else "apis"
        paths[f"{prefix}/{api_version}"] = {
            "serverRelativeURL": f"/openapi/v3/{prefix}/{api_version}?hash=sandbox"
        }
    return {"paths": paths}


def openapi_v3(api_version: str) -> dict[str, Any] | None:
    """A permissive schema per kind: kubectl finds every kind, and the server checks the rest."""
    found = groups().get(api_version)
    if found is None:
        return None
    schemas = {}
    for r in found:
        package = f"io.k8s.api.{r.group.split('.')[0] or 'core'}.{r.version}.{r.kind}"
        schemas[package] = {
            "type": "object",
            "x-kubernetes-group-version-kind": [
                {"group": r.group, "kind": r.kind, "version": r.version}
            ],
            "x-kubernetes-preserve-unknown-fields": True,
        }
    # kubectl looks for the PATCH operation of each kind and its `fieldValidation` parameter; when
    # the server has it, kubectl leaves validation to the server instead of downloading schemas.
    paths = {}
    for r in found:
        prefix = f"/apis/{r.api_version}" if r.group else "/api/v1"
        scope = "/namespaces/{namespace}" if r.namespaced else ""
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        paths[f"{prefix}{scope}/{r.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{r.kind}",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "burst sandbox", "version": "v1.31.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
