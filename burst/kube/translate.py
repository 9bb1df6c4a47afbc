"""Translate a local Job or PyTorchJob into its remote copy, and refuse what cannot be made safe.

Pure: replicate.py applies the result to the clusters, `burst explain` prints it. The remote copy
is pinned to its pool (node selector + toleration), carries origin labels (installation id, local
uid) and a deterministic name per attempt, runs in the mapped namespace, and keeps only what is
known to be safe: the workload's own fields by an allow-list here, each pod template's by
sanitise.py's. What is refused is named by its path; what is dropped because it cannot matter in
the cloud (the user's TTL, on-prem node labels, Kueue's labels) is listed for an Event. Every
reason is collected, not only the first.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from burst.config import Replication
from burst.kube.sanitise import Allowed, Checked, foreign, sanitise_template
from burst.model import GPU_TAINT_KEY, NODE_POOL_LABEL

AKS_SPOT_TAINT_KEY = "kubernetes.azure.com/scalesetpriority"
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


# The workload's own fields a copy keeps (after the ones burst sets or drops above).
JOB_FIELDS = frozenset(
    {
        "parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "completionMode",
        "podFailurePolicy", "backoffLimitPerIndex", "maxFailedIndexes", "successPolicy",
        "podReplacementPolicy", "template", "suspend",
    }
)  # fmt: skip
PYTORCHJOB_FIELDS = frozenset({"pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"})
RUN_POLICY_FIELDS = frozenset({"cleanPodPolicy", "activeDeadlineSeconds", "backoffLimit"})
REPLICA_FIELDS = frozenset({"replicas", "template", "restartPolicy"})


def _allow(path: str, fields: dict[str, Any], allowed: frozenset[str], t: Translation) -> None:
    for key in sorted(set(fields) - allowed):
        t.refusals.append(f"{path}.{key}: not a field burst sends to a shared cluster")


@dataclass
class Translation:
    remote: dict[str, Any]
    secrets: list[str] = field(default_factory=list)
    config_maps: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    service_accounts: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    stripped: list[str] = field(default_factory=list)  # safe to drop, said in an Event

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


def _pin(pod: dict[str, Any], pool: str) -> None:
    """Run on the pool's nodes only: select them and tolerate their GPU taint; the template's
    labels lose what the local API server set."""
    spec = pod.setdefault("spec", {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), NODE_POOL_LABEL: pool}
    ours = {GPU_TAINT_KEY, AKS_SPOT_TAINT_KEY, NODE_POOL_LABEL}
    tolerations = [t for t in spec.get("tolerations") or [] if t.get("key") not in ours]
    # The pool's own taint, which nothing but its copies tolerates, and GKE's GPU taint.
    tolerations.append(
        {"key": NODE_POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
    )
    tolerations.append({"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    # AKS taints every spot node itself; the copy must go there when its pool is spot.
    tolerations.append(
        {"key": AKS_SPOT_TAINT_KEY, "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
    )
    spec["tolerations"] = tolerations
    meta = pod.setdefault("metadata", {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _SERVER_LABELS}
    meta["labels"] = labels


# A pod a disruption ended (its spot node reclaimed: pod GC marks it DisruptionTarget) is not the
# job's failure, and must not count against the user's backoffLimit on burst's choice of spot.
# The status written out as the API server fills it in (pkg/apis/batch/v1/defaults.go
# SetDefaults_Job), so that the copy read back carries the rule exactly as written.
IGNORE_DISRUPTION = {
    "action": "Ignore",
    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
}


def _disruptions_ignorable(spec: Mapping[str, Any]) -> bool:
    """Whether a Job's copy may carry IGNORE_DISRUPTION: the API server allows a pod failure
    policy only with restartPolicy Never (and podReplacementPolicy Failed, which the copy then
    gets: see _ignore_disruptions)."""
    return ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "Never"


def _ignore_disruptions(spec: dict[str, Any]) -> None:
    """The copy's pod failure policy ignores disruptions, ahead of the user's own rules; where
    the API server allows none, the copy stays as the user wrote it. A pod failure policy
    needs podReplacementPolicy Failed: a Job without one is read back with TerminatingOrFailed
    (the default since 1.29, SetDefaults_Job), whether its author chose it or not, so the copy
    makes its next pod once the last has failed rather than while it terminates."""
    if not _disruptions_ignorable(spec):
        return
    policy = spec.get("podFailurePolicy") or {}
    spec["podFailurePolicy"] = {
        **policy,
        "rules": [IGNORE_DISRUPTION, *(policy.get("rules") or [])],
    }
    if spec.get("podReplacementPolicy") is not None:
        spec["podReplacementPolicy"] = "Failed"


def fails_on_reclaim(obj: Mapping[str, Any]) -> bool:
    """Whether losing a node under its copy fails the job, rather than running the pod again:
    a PyTorchJob with a replica whose restartPolicy is Never (the training operator fails the
    job on a failed pod then, and makes one again under OnFailure, Always and ExitCode, a lost
    node's pod having no exit code: kubeflow/training-operator v1.9.0 common/pod.go
    ReconcilePods, pytorchjob_controller.go UpdateJobStatus), or a backoffLimit of 0 that a
    disruption counts against (a PyTorchJob's always; a Job's where its copy cannot ignore
    disruptions). Such a copy goes on no spot that the decision chooses."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        replicas = (spec.get("pytorchReplicaSpecs") or {}).values()
        never = any((r or {}).get("restartPolicy") == "Never" for r in replicas)
        return never or (spec.get("runPolicy") or {}).get("backoffLimit") == 0
    return spec.get("backoffLimit") == 0 and not _disruptions_ignorable(spec)


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
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if k not in _SERVER_LABELS and not foreign(k)
    }
    labels.update({ORIGIN_UID: uid, ORIGIN_INSTALLATION: installation})
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration" and not foreign(k)
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
        for key in ("selector", "manualSelector", "managedBy", "ttlSecondsAfterFinished"):
            spec.pop(key, None)
        spec["suspend"] = False
        _allow("spec", spec, JOB_FIELDS, t)
        _ignore_disruptions(spec)
    elif obj.get("kind") == "PyTorchJob":
        run_policy = spec.get("runPolicy") or {}
        for key in ("suspend", "managedBy", "ttlSecondsAfterFinished"):
            run_policy.pop(key, None)
        if run_policy.pop("schedulingPolicy", None) is not None:
            t.stripped.append("spec.runPolicy.schedulingPolicy: on-prem gang scheduling")
        _allow("spec", spec, PYTORCHJOB_FIELDS, t)
        _allow("spec.runPolicy", run_policy, RUN_POLICY_FIELDS, t)
        for rtype, rspec in sorted((spec.get("pytorchReplicaSpecs") or {}).items()):
            _allow(f"spec.pytorchReplicaSpecs.{rtype}", rspec or {}, REPLICA_FIELDS, t)
    else:
        t.refusals.append(
            f"a {obj.get('kind')} cannot burst: only Jobs and PyTorchJobs do (wrap it in a Job)"
        )
        return t
    allowed = Allowed(
        secrets=frozenset(rules.secrets),
        config_maps=frozenset(rules.config_maps),
        registry_ok=lambda image: registry_allowed(image, rules.image_registries),
        registries=", ".join(rules.image_registries),
        service_account_token=rules.allow_service_account_token,
    )
    checked = Checked()
    for where, template in pod_templates(remote):
        sanitise_template(where, template, allowed, checked)
        _pin(template, pool)
    t.secrets, t.config_maps, t.claims = checked.secrets, checked.config_maps, checked.claims
    t.service_accounts, t.stripped = checked.service_accounts, checked.stripped
    t.refusals += checked.refusals
    return t
