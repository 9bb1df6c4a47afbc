"""Translate a local Job or PyTorchJob into its remote copy, and refuse what cannot be made safe.

Pure: replicate.py applies the result to the clusters, `burst explain` prints it. The remote copy
is pinned to its pool (node selector + toleration), carries origin labels (installation id, local
uid) and a deterministic name, runs in the mapped namespace, and keeps only what the policy
allows. Refused: privileged containers, hostPath volumes, host namespaces, host ports, added
capabilities, a service-account token unless allowed, images outside the allowed registries,
Secrets and ConfigMaps not on the allow-lists. Every reason is collected, not only the first.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from burst.config import Replication
from burst.model import GPU_TAINT_KEY, NODE_POOL_LABEL

ORIGIN_UID = "burst.dev/origin-uid"
ORIGIN_INSTALLATION = "burst.dev/installation"
ORIGIN_ANNOTATION = "burst.dev/origin"
MANAGED_BY = "burst.dev/controller"
# Labels and fields the local API server set on the local object; the remote server sets its own.
_SERVER_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)
_GPU_SELECTOR_KEYS = ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory")


@dataclass
class Translation:
    remote: dict[str, Any]
    secrets: list[str] = field(default_factory=list)
    config_maps: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        return not self.refusals


def remote_name(name: str, uid: str, attempt: int = 1) -> str:
    """Deterministic and unique per local object and attempt: the name, shortened, part of the
    uid, and from the second attempt on its number (a requeued workload's next copy is a new
    object, never the stale copy pinned to a pool that is gone)."""
    suffix = uid.replace("-", "")[:8] + (f"-r{attempt}" if attempt > 1 else "")
    stem = re.sub(r"[^a-z0-9-]", "-", name.lower())[: 63 - len(suffix) - 1].strip("-")
    return f"{stem}-{suffix}"


def pod_templates(obj: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, template) for every pod template of a Job or a PyTorchJob."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        for rtype, rspec in sorted((spec.get("pytorchReplicaSpecs") or {}).items()):
            yield f"pytorchReplicaSpecs.{rtype}", (rspec or {}).setdefault("template", {})
    else:
        yield "template", spec.setdefault("template", {})


def registry_allowed(image: str, registries: list[str]) -> bool:
    """Whether `image` comes from one of `registries` (a host, or a host/path prefix)."""
    ref = image.split("@")[0]
    first = ref.split("/")[0]
    if "/" not in ref or ("." not in first and ":" not in first and first != "localhost"):
        ref = "docker.io/" + (ref if "/" in ref else f"library/{ref}")
    return any(ref == r or ref.startswith(r.rstrip("/") + "/") for r in registries)


def _check_pod(where: str, pod: dict[str, Any], rules: Replication, t: Translation) -> None:
    spec = pod.setdefault("spec", {})
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            t.refusals.append(f"{where}: {host} is not allowed on a burst cluster")
    if spec.get("automountServiceAccountToken") and not rules.allow_service_account_token:
        t.refusals.append(
            f"{where}: a service-account token is mounted; the policy does not allow it"
        )
    if not rules.allow_service_account_token:
        spec["automountServiceAccountToken"] = False
        spec.pop("serviceAccountName", None)
        spec.pop("serviceAccount", None)
    for volume in spec.get("volumes") or []:
        name = volume.get("name", "?")
        if "hostPath" in volume:
            t.refusals.append(f"{where}: volume {name} uses hostPath")
        if "secret" in volume:
            _secret(where, volume["secret"].get("secretName", ""), rules, t)
        if "configMap" in volume:
            _config_map(where, volume["configMap"].get("name", ""), rules, t)
        if "persistentVolumeClaim" in volume:
            t.claims.append(volume["persistentVolumeClaim"].get("claimName", ""))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                _secret(where, source["secret"].get("name", ""), rules, t)
            if "configMap" in source:
                _config_map(where, source["configMap"].get("name", ""), rules, t)
            if "serviceAccountToken" in source and not rules.allow_service_account_token:
                t.refusals.append(f"{where}: volume {name} projects a service-account token")
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for c in containers:
        cname = f"{where} container {c.get('name', '?')}"
        context = c.get("securityContext") or {}
        if context.get("privileged"):
            t.refusals.append(f"{cname}: privileged containers are not allowed")
        if context.get("allowPrivilegeEscalation"):
            t.refusals.append(f"{cname}: allowPrivilegeEscalation is not allowed")
        added = (context.get("capabilities") or {}).get("add") or []
        if added:
            t.refusals.append(f"{cname}: added capabilities {', '.join(added)} are not allowed")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            t.refusals.append(f"{cname}: hostPort is not allowed")
        image = c.get("image", "")
        if not registry_allowed(image, rules.image_registries):
            t.refusals.append(
                f"{cname}: image {image} is not from an allowed registry "
                f"({', '.join(rules.image_registries)})"
            )
        for env in c.get("env") or []:
            ref = env.get("valueFrom") or {}
            if "secretKeyRef" in ref:
                _secret(cname, ref["secretKeyRef"].get("name", ""), rules, t)
            if "configMapKeyRef" in ref:
                _config_map(cname, ref["configMapKeyRef"].get("name", ""), rules, t)
        for source in c.get("envFrom") or []:
            if "secretRef" in source:
                _secret(cname, source["secretRef"].get("name", ""), rules, t)
            if "configMapRef" in source:
                _config_map(cname, source["configMapRef"].get("name", ""), rules, t)


def _secret(where: str, name: str, rules: Replication, t: Translation) -> None:
    if name in rules.secrets:
        if name not in t.secrets:
            t.secrets.append(name)
    else:
        t.refusals.append(f"{where}: Secret {name} is not on the policy's allow-list")


def _config_map(where: str, name: str, rules: Replication, t: Translation) -> None:
    if name in rules.config_maps:
        if name not in t.config_maps:
            t.config_maps.append(name)
    else:
        t.refusals.append(f"{where}: ConfigMap {name} is not on the policy's allow-list")


def _pin(pod: dict[str, Any], pool: str) -> None:
    """Run on the pool's nodes only: select them, tolerate their GPU taint, and drop on-prem GPU
    product constraints (the pool may carry a substitute GPU)."""
    spec = pod.setdefault("spec", {})
    selector = {
        k: v for k, v in (spec.get("nodeSelector") or {}).items() if k not in _GPU_SELECTOR_KEYS
    }
    spec["nodeSelector"] = {**selector, NODE_POOL_LABEL: pool}
    affinity = (spec.get("affinity") or {}).get("nodeAffinity")
    if affinity:
        spec["affinity"].pop("nodeAffinity")
        if not spec["affinity"]:
            spec.pop("affinity")
    tolerations = [t for t in spec.get("tolerations") or [] if t.get("key") != GPU_TAINT_KEY]
    tolerations.append({"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    spec["tolerations"] = tolerations
    meta = pod.setdefault("metadata", {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _SERVER_LABELS}
    meta["labels"] = labels


def translate(
    local: Mapping[str, Any],
    *,
    pool: str,
    remote_namespace: str,
    installation: str,
    rules: Replication,
    attempt: int = 1,
) -> Translation:
    """The remote copy of `local` for `pool`, and every reason it cannot be sent (pure)."""
    obj = copy.deepcopy(dict(local))
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    name = str(meta.get("name", ""))
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _SERVER_LABELS}
    labels.update({ORIGIN_UID: uid, ORIGIN_INSTALLATION: installation})
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    annotations[ORIGIN_ANNOTATION] = f"{meta.get('namespace', '')}/{name}"
    remote: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {
            "name": remote_name(name, uid, attempt),
            "namespace": remote_namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": obj.get("spec") or {},
    }
    t = Translation(remote)
    spec = remote["spec"]
    # The copy is burst's to clean up once sync has read its outcome: the user's TTL after
    # finishing stays on the user's job (the TTL controller could delete the copy before sync saw
    # it finish, and the local job would wait for ever).
    if obj.get("kind") == "Job":
        spec.pop("selector", None)
        spec.pop("manualSelector", None)
        spec.pop("managedBy", None)
        spec.pop("ttlSecondsAfterFinished", None)
        spec["suspend"] = False
    elif obj.get("kind") == "PyTorchJob":
        run_policy = spec.get("runPolicy") or {}
        for key in ("suspend", "managedBy", "ttlSecondsAfterFinished"):
            run_policy.pop(key, None)
        spec.pop("managedBy", None)
    else:
        t.refusals.append(
            f"a {obj.get('kind')} cannot burst: only Jobs and PyTorchJobs do (wrap it in a Job)"
        )
        return t
    for where, template in pod_templates(remote):
        _check_pod(where, template, rules, t)
        _pin(template, pool)
    return t
