"""Admission in the sandbox API server: what the real API server fills in or refuses on create,
before an object is stored (only what clients here rely on)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from burst.kube.quantity import quantity
from burst.sandbox.errors import ApiError
from burst.sandbox.resources import Resource

Obj = dict[str, Any]


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def admit_quota(quotas: Iterable[Obj], namespace: str, pod: Obj) -> None:
    """ResourceQuota admission for GPU requests, against the quota's status.used as the real
    admission plugin evaluates it (the sandbox has no quota controller to keep `used` current)."""
    wanted: dict[str, float] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        resources = c.get("resources") or {}
        limits = resources.get("limits") or {}
        # Requests default to limits, as for extended resources such as GPUs.
        for kind, values in (
            ("requests", {**limits, **(resources.get("requests") or {})}),
            ("limits", limits),
        ):
            for name, value in values.items():
                key = f"{kind}.{name}"
                wanted[key] = wanted.get(key, 0.0) + quantity(value)
    for quota in quotas:
        if _meta(quota).get("namespace") != namespace:
            continue
        hard = (
            (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
        )
        used = (quota.get("status") or {}).get("used") or {}
        for key, limit in hard.items():
            asked = wanted.get(key, 0.0)
            if asked and quantity(used.get(key, 0)) + asked > quantity(limit):
                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{_meta(pod).get("name", "")}" is forbidden: exceeded quota: '
                    f"{_meta(quota)['name']}, requested: {key}={asked:g}, "
                    f"used: {key}={used.get(key, 0)}, limited: {key}={limit}",
                )


def defaults(res: Resource, obj: Obj) -> None:
    """What the real API server fills in on create (only what clients here rely on)."""
    spec = obj.get("spec")
    if res.kind == "Pod":
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("containers", [])
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif res.kind == "Job" and isinstance(spec, dict):
        uid = obj["metadata"]["uid"]
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("suspend", False)
        spec.setdefault("completionMode", "NonIndexed")
        # pkg/apis/batch/v1/defaults.go SetDefaults_Job: a condition pattern's status, and the
        # replacement policy (JobPodReplacementPolicy, on by default since 1.29).
        policy = spec.get("podFailurePolicy")
        for rule in (policy or {}).get("rules") or []:
            for pattern in rule.get("onPodConditions") or []:
                pattern.setdefault("status", "True")
        spec.setdefault("podReplacementPolicy", "Failed" if policy else "TerminatingOrFailed")
        if "completions" not in spec:
            spec["completions"] = spec["parallelism"] if spec["parallelism"] == 1 else None
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        template = spec.setdefault("template", {})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.setdefault("batch.kubernetes.io/controller-uid", uid)
        labels.setdefault("batch.kubernetes.io/job-name", obj["metadata"]["name"])
        labels.setdefault("controller-uid", uid)
        labels.setdefault("job-name", obj["metadata"]["name"])
        obj["status"] = {}
    elif res.kind == "Namespace":
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
    elif res.status and res.kind != "Node":
        obj.pop("status", None)


# Priority classes every cluster has without an object (plugin/pkg/admission/priority).
SYSTEM_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})


def pod_references(pod: Obj) -> list[tuple[str, str, str]]:
    """(kind, namespace or "", name) of the objects a pod's admission plugins look up."""
    spec = pod.get("spec") or {}
    namespace = _meta(pod).get("namespace", "")
    refs = [("ServiceAccount", namespace, spec.get("serviceAccountName") or "default")]
    priority = spec.get("priorityClassName")
    if priority and priority not in SYSTEM_PRIORITY_CLASSES:
        refs.append(("PriorityClass", "", priority))
    if spec.get("runtimeClassName"):
        refs.append(("RuntimeClass", "", spec["runtimeClassName"]))
    return refs


def missing_reference(kind: str, namespace: str, name: str) -> str:
    """The admission plugins' words when a pod names what does not exist (all answered 403):
    plugin/pkg/admission/serviceaccount, .../priority resolvePriorityClass,
    .../runtimeclass prepareObjects."""
    if kind == "ServiceAccount":
        return f'error looking up service account {namespace}/{name}: serviceaccount "{name}" not found'
    if kind == "PriorityClass":
        return f"no PriorityClass with name {name} was found"
    return f'pod rejected: RuntimeClass "{name}" not found'


def forbidden(plural: str, group: str, name: str, why: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    subject = f'{qualified} "{name}"' if name else qualified
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}")


def fold_string_data(secret: Obj) -> None:
    """A Secret's stringData is merged into data, base64-encoded, on every write, and never read
    back (core/v1 Secret: "stringData ... is never output when reading from the API")."""
    plain = secret.pop("stringData", None)
    if plain:
        data = dict(secret.get("data") or {})
        data.update({k: base64.b64encode(str(v).encode()).decode() for k, v in plain.items()})
        secret["data"] = data
