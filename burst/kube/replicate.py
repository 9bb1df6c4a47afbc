"""Replicate a workload to its pool's cluster: suspend the local copy, then create the remote one.

The order is what guarantees one copy: the local Job (`spec.suspend`) or PyTorchJob
(`runPolicy.suspend`) is suspended before the remote copy is created, and a workload that has
started on-prem meanwhile is not dispatched (it is resumed if we suspended it). The remote copy is
created if absent; an AlreadyExists of our own copy (same origin uid) is success; a same-named
object without our origin label is never touched. Allowed Secrets and ConfigMaps are copied with
origin labels; nothing else is. Refusals become a Warning Event on the user's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from burst import failpoints
from burst.config import Replication
from burst.kube.events import EventRecorder
from burst.kube.translate import ORIGIN_INSTALLATION, ORIGIN_UID, Translation, translate
from burst.model import KUEUE_QUEUE_LABEL, NODE_POOL_LABEL

Outcome = Literal["dispatched", "refused", "started-on-prem"]


@dataclass
class DispatchResult:
    outcome: Outcome
    remote_namespace: str = ""
    remote_name: str = ""
    reasons: list[str] = field(default_factory=list)


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


class KubeObjects:
    """Read, create, patch and delete Jobs, PyTorchJobs, Secrets, ConfigMaps through one client."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        # Typed Any: raw JSON goes in and out here (_preload_content=False), not the client's models.
        self.api = api_client
        self.core: Any = client.CoreV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            if kind == "Job":
                response = self.batch.read_namespaced_job(name, namespace, _preload_content=False)
            elif kind == "PyTorchJob":
                response = self.custom.get_namespaced_custom_object(
                    "kubeflow.org", "v1", namespace, "pytorchjobs", name, _preload_content=False
                )
            elif kind == "Secret":
                response = self.core.read_namespaced_secret(name, namespace, _preload_content=False)
            elif kind == "ConfigMap":
                response = self.core.read_namespaced_config_map(
                    name, namespace, _preload_content=False
                )
            elif kind == "PersistentVolumeClaim":
                response = self.core.read_namespaced_persistent_volume_claim(
                    name, namespace, _preload_content=False
                )
            elif kind == "ServiceAccount":
                response = self.core.read_namespaced_service_account(
                    name, namespace, _preload_content=False
                )
            else:
                raise ValueError(f"unsupported kind {kind}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

        found: dict[str, Any] = json.loads(response.data)
        return found

    def create(self, obj: Mapping[str, Any]) -> None:
        namespace = _meta(obj)["namespace"]
        kind = obj["kind"]
        body = dict(obj)
        if kind == "Job":
            self.batch.create_namespaced_job(namespace, body, _preload_content=False)
        elif kind == "PyTorchJob":
            self.custom.create_namespaced_custom_object(
                "kubeflow.org", "v1", namespace, "pytorchjobs", body
            )
        elif kind == "Secret":
            self.core.create_namespaced_secret(namespace, body, _preload_content=False)
        elif kind == "ConfigMap":
            self.core.create_namespaced_config_map(namespace, body, _preload_content=False)
        else:
            raise ValueError(f"unsupported kind {kind}")

    def patch(
        self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], status: bool = False
    ) -> None:
        merge = "application/merge-patch+json"
        if kind == "Job":
            method = (
                self.batch.patch_namespaced_job_status
                if status
                else self.batch.patch_namespaced_job
            )
            method(name, namespace, dict(patch), _content_type=merge, _preload_content=False)
        elif kind == "PyTorchJob":
            method = (
                self.custom.patch_namespaced_custom_object_status
                if status
                else self.custom.patch_namespaced_custom_object
            )
            method("kubeflow.org", "v1", namespace, "pytorchjobs", name, dict(patch))
        elif kind in ("Secret", "ConfigMap"):
            method = (
                self.core.patch_namespaced_secret
                if kind == "Secret"
                else self.core.patch_namespaced_config_map
            )
            method(name, namespace, dict(patch), _preload_content=False)
        else:
            raise ValueError(f"unsupported kind {kind}")

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete with background propagation, so that the object's pods go too; absent is done."""
        from kubernetes.client.exceptions import ApiException

        try:
            if kind == "Job":
                self.batch.delete_namespaced_job(
                    name, namespace, propagation_policy="Background", _preload_content=False
                )
            elif kind == "PyTorchJob":
                self.custom.delete_namespaced_custom_object(
                    "kubeflow.org",
                    "v1",
                    namespace,
                    "pytorchjobs",
                    name,
                    propagation_policy="Background",
                )
            elif kind in ("Secret", "ConfigMap"):
                method = (
                    self.core.delete_namespaced_secret
                    if kind == "Secret"
                    else self.core.delete_namespaced_config_map
                )
                method(name, namespace, _preload_content=False)
            else:
                raise ValueError(f"unsupported kind {kind}")
        except ApiException as exc:
            if exc.status != 404:
                raise

    def ensure_namespace(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.create_namespace({"metadata": {"name": name}}, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def ready_gpu_nodes(self, pool: str) -> int:
        """Nodes of `pool` that have joined: Ready, with allocatable nvidia.com/gpu (the device
        plugin runs on them)."""
        response = self.core.list_node(
            label_selector=f"{NODE_POOL_LABEL}={pool}", _preload_content=False
        )
        count = 0
        for node in json.loads(response.data).get("items") or []:
            status = node.get("status") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            gpus = (status.get("allocatable") or {}).get("nvidia.com/gpu", "0")
            count += ready and str(gpus) not in ("", "0")
        return count

    def pods_of(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        uid = _meta(obj)["uid"]
        # Only its pods, by the labels their controller gives them, not the whole namespace.
        selector = (
            f"batch.kubernetes.io/controller-uid={uid}"
            if obj.get("kind") == "Job"
            else f"training.kubeflow.org/job-name={_meta(obj)['name']}"
        )
        response = self.core.list_namespaced_pod(
            _meta(obj)["namespace"], label_selector=selector, _preload_content=False
        )
        return [
            p
            for p in json.loads(response.data).get("items") or []
            if any(r.get("uid") == uid for r in _meta(p).get("ownerReferences") or [])
        ]


def suspend_patch(kind: str, suspend: bool) -> dict[str, Any]:
    return (
        {"spec": {"suspend": suspend}}
        if kind == "Job"
        else {"spec": {"runPolicy": {"suspend": suspend}}}
    )


def is_suspended(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    return bool(
        spec.get("suspend")
        if obj.get("kind") == "Job"
        else (spec.get("runPolicy") or {}).get("suspend")
    )


class Replicator:
    def __init__(self, local: KubeObjects, events: EventRecorder, installation: str) -> None:
        self.local, self.events, self.installation = local, events, installation

    def _started(self, obj: Mapping[str, Any]) -> bool:
        return any(
            (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
            for p in self.local.pods_of(obj)
        )

    def dispatch(
        self,
        obj: Mapping[str, Any],
        remote: KubeObjects,
        *,
        target: str,
        pool: str,
        remote_namespace: str,
        rules: Replication,
        attempt: int = 1,
        namespace_made: bool = False,
    ) -> DispatchResult:
        """Send one workload to `remote` (see the class). `namespace_made`: the caller has
        made sure of the remote namespace already (once for many dispatches)."""
        from kubernetes.client.exceptions import ApiException

        meta = _meta(obj)
        t: Translation = translate(
            obj,
            pool=pool,
            remote_namespace=remote_namespace,
            installation=self.installation,
            rules=rules,
            attempt=attempt,
        )
        name = _meta(t.remote)["name"]
        # What the copy names must exist there, or its pods are never created.
        for kind, names in (
            ("PersistentVolumeClaim", t.claims),
            ("ServiceAccount", t.service_accounts),
        ):
            for item in names:
                if remote.read(kind, remote_namespace, item) is None:
                    t.refusals.append(
                        f"{kind} {item} does not exist in {target}/{remote_namespace}"
                    )
        if not t.safe:
            self.events.record(
                obj, "Warning", "BurstRefused", "not sent to a cloud: " + "; ".join(t.refusals)
            )
            return DispatchResult("refused", remote_namespace, name, t.refusals)
        # A Kueue job is taken out of Kueue's hands first, while Kueue still holds it suspended:
        # admitted later, Kueue would resume it here beside its copy.
        queue = (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        if queue:
            held = self._take_from_kueue(obj, queue, remote_namespace, name)
            if held is not None:
                return held
        # One copy: suspend here first; a workload that started on-prem stays here.
        we_suspended = not is_suspended(obj)
        if self._started(obj):
            if queue:
                self._label(obj, queue)
            return DispatchResult("started-on-prem", remote_namespace, name)
        if we_suspended:
            self._suspend(obj, True)
            if self._started(obj):  # it began between our look and the suspension
                self._suspend(obj, False)
                return DispatchResult("started-on-prem", remote_namespace, name)
            # Read it back: a CRD of an operator without the field prunes it silently.
            fresh = self.local.read(obj["kind"], meta["namespace"], meta["name"])
            if fresh is not None and not is_suspended(fresh):
                return self._refuse(
                    obj,
                    remote_namespace,
                    name,
                    f"this cluster's training operator cannot suspend a {obj['kind']} "
                    "(spec.runPolicy.suspend needs kubeflow/training-operator v1.7 or newer): "
                    "a copy would run beside it",
                )
        failpoints.hit("local-suspended")
        if not namespace_made:
            remote.ensure_namespace(remote_namespace)
        for kind, names in (("Secret", t.secrets), ("ConfigMap", t.config_maps)):
            for item in names:
                self._copy(kind, meta["namespace"], item, remote, remote_namespace)
        # Created at once (the usual case); one already there (a pass that died after creating
        # it, or someone else's of that name) answers 409 and is read to tell which.
        existing = None
        try:
            remote.create(t.remote)
        except ApiException as exc:
            existing = (
                remote.read(obj["kind"], remote_namespace, name) if exc.status == 409 else None
            )
            if existing is None:
                raise
        if (
            existing is not None
            and (_meta(existing).get("labels") or {}).get(ORIGIN_UID) != meta["uid"]
        ):
            if we_suspended:
                self._suspend(obj, False)
            if queue:
                self._label(obj, queue)  # Kueue's again
            return self._refuse(
                obj,
                remote_namespace,
                name,
                f"{target} already has a {obj['kind']} {remote_namespace}/{name} "
                "that burst did not create",
            )
        failpoints.hit("remote-created")
        if t.stripped:
            self.events.record(
                obj, "Normal", "BurstAdjusted", "the cloud copy leaves out " + "; ".join(t.stripped)
            )
        self.events.record(
            obj, "Normal", "Burst", f"sent to {target} (pool {pool}) as {remote_namespace}/{name}"
        )
        return DispatchResult("dispatched", remote_namespace, name)

    def _take_from_kueue(
        self, obj: Mapping[str, Any], queue: str, remote_namespace: str, name: str
    ) -> DispatchResult | None:
        """Remove the queue label while Kueue holds the job suspended, its supported way out
        (kueue jobframework/validation.go allows it only then; Kueue then leaves the job alone).
        None when done; else why the job stays with Kueue."""
        from kubernetes.client.exceptions import ApiException

        if not is_suspended(obj):  # Kueue admitted it: it runs here
            return DispatchResult("started-on-prem", remote_namespace, name)
        try:
            self._label(obj, None)
        except ApiException as exc:
            fresh = self.local.read(obj["kind"], _meta(obj)["namespace"], _meta(obj)["name"])
            if fresh is not None and not is_suspended(fresh):  # admitted meanwhile
                return DispatchResult("started-on-prem", remote_namespace, name)
            why = json.loads(exc.body or "{}").get("message") if exc.body else exc.reason
            return self._refuse(
                obj, remote_namespace, name, f"Kueue keeps it in queue {queue}: {why}"
            )
        return None

    def _label(self, obj: Mapping[str, Any], queue: str | None) -> None:
        """Put the Kueue queue label back (a refusal), or take it off (None)."""
        meta = _meta(obj)
        patch = {"metadata": {"labels": {KUEUE_QUEUE_LABEL: queue}}}
        self.local.patch(obj["kind"], meta["namespace"], meta["name"], patch)

    def _suspend(self, obj: Mapping[str, Any], suspend: bool) -> None:
        meta = _meta(obj)
        self.local.patch(
            obj["kind"], meta["namespace"], meta["name"], suspend_patch(obj["kind"], suspend)
        )

    def _refuse(
        self, obj: Mapping[str, Any], remote_namespace: str, name: str, reason: str
    ) -> DispatchResult:
        self.events.record(obj, "Warning", "BurstRefused", reason)
        return DispatchResult("refused", remote_namespace, name, [reason])

    def _copy(
        self, kind: str, namespace: str, name: str, remote: KubeObjects, remote_namespace: str
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        source = self.local.read(kind, namespace, name)
        if source is None:
            return
        copy = {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": remote_namespace,
                "labels": {
                    ORIGIN_UID: _meta(source)["uid"],
                    ORIGIN_INSTALLATION: self.installation,
                },
            },
        }
        for key in ("data", "stringData", "binaryData", "type"):
            if key in source:
                copy[key] = source[key]
        existing = remote.read(kind, remote_namespace, name)
        if existing is None:
            try:
                remote.create(copy)
                return
            except ApiException as exc:
                # Another dispatch of this pass copied it a moment ago (they run at once): the
                # server answers 409 AlreadyExists; bring that one up to date as below.
                existing = remote.read(kind, remote_namespace, name) if exc.status == 409 else None
                if existing is None:
                    raise
        if (_meta(existing).get("labels") or {}).get(ORIGIN_INSTALLATION) == self.installation:
            # Ours from an earlier dispatch: brought up to date (a rotated key must reach the
            # cloud too). Someone else's of that name is left as it is.
            content = {
                k: copy.get(k) for k in ("data", "binaryData") if existing.get(k) != copy.get(k)
            }
            if content or "stringData" in copy:
                remote.patch(kind, remote_namespace, name, {**content, **_string_data(copy)})


def _string_data(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"stringData": obj["stringData"]} if "stringData" in obj else {}
