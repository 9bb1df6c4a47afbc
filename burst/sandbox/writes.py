"""Writes to the sandbox store: create (with admission), replace and patch (merge, JSON and
strategic merge, with optimistic concurrency: 409 on a stale resourceVersion), status subresources,
and pod binding. Stored objects are never mutated in place: every write stores a new dict."""

from __future__ import annotations

import copy
import string
import uuid
from datetime import datetime
from typing import Any

from burst.sandbox.admission import (
    admit_quota,
    defaults,
    fold_string_data,
    forbidden,
    missing_reference,
    pod_references,
)
from burst.sandbox.crds import prune_pytorchjob
from burst.sandbox.errors import ApiError, already_exists, conflict, not_found
from burst.sandbox.objects import Obj, ObjectState, meta_of, timestamp
from burst.sandbox.patch import json_patch, merge_patch, strategic_merge_patch
from burst.sandbox.resources import BY_KIND, Resource
from burst.sandbox.validation import invalid, job_create_problems, job_status_problems

CONTROLLERS = "kube-controller-manager"
MAX_UPDATE_MANAGERS = 10  # apimachinery .../managedfields/internal/fieldmanager.go


class Writes(ObjectState):
    def create(self, res: Resource, namespace: str, body: Obj, manager: str = CONTROLLERS) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if obj.get("kind", res.kind) != res.kind:
            raise ApiError(400, "BadRequest", f"kind {obj.get('kind')} does not match {res.kind}")
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        with self._cond:
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix:
                    raise ApiError(422, "Invalid", f"{res.kind} name or generateName is required")
                alphabet = string.ascii_lowercase + string.digits
                meta["name"] = prefix + "".join(self._rng.choice(alphabet) for _ in range(5))
            if res.namespaced:
                namespace = namespace or meta.get("namespace") or "default"
                if meta.get("namespace", namespace) != namespace:
                    raise ApiError(
                        400, "BadRequest", "the namespace of the object does not match the request"
                    )
                owner = self._objects["/namespaces"].get(("", namespace))
                if owner is None:
                    raise not_found("namespaces", namespace)
                if meta_of(owner).get("deletionTimestamp"):
                    # The NamespaceLifecycle admission plugin (apiserver pkg/admission/plugin/
                    # namespace/lifecycle): no new content while a namespace terminates.
                    raise forbidden(
                        res.plural,
                        res.group,
                        meta["name"],
                        f"unable to create new content in namespace {namespace} "
                        "because it is being terminated",
                    )
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
                namespace = ""
            key = (namespace, meta["name"])
            if key in self._objects[res.key]:
                raise already_exists(res.plural, meta["name"], res.group)
            if res.kind == "Pod":
                for kind, where, name in pod_references(obj):
                    ref = BY_KIND[kind]
                    if (where, name) not in self._objects[ref.key]:
                        raise forbidden(
                            "pods", "", meta["name"], missing_reference(kind, where, name)
                        )
                admit_quota(self._objects["/resourcequotas"].values(), namespace, obj)
            meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            meta["creationTimestamp"] = timestamp(self.clock.now())
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            if res.kind == "Job" and self.kueue is not None:
                self.kueue.on_create(obj)
            if res.kind == "Secret":
                fold_string_data(obj)
            defaults(res, obj)
            if res.kind == "PyTorchJob":
                prune_pytorchjob(obj, self.training_operator)
            if res.kind == "Job":
                problems = job_create_problems(obj)
                if problems:
                    raise invalid("Job", res.group, meta["name"], problems)
            meta["managedFields"] = managed_fields(obj, [], manager, res, self.clock.now())
            meta["resourceVersion"] = self._next_rv()
            self._objects[res.key][key] = obj
            self._uids.add(meta["uid"])
            self._index_owners(res, obj, None)
            self._record("ADDED", res, obj, None)
            if res.kind == "Namespace":
                # The serviceaccounts controller gives every namespace its `default` account.
                self.create(
                    BY_KIND["ServiceAccount"], meta["name"], {"metadata": {"name": "default"}}
                )
            return obj

    def replace(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: Obj,
        status: bool = False,
        manager: str = CONTROLLERS,
    ) -> Obj:
        """PUT: the whole object (or, with `status`, only its status)."""
        with self._cond:
            current = self.get(res, namespace, name)
            want = meta_of(body).get("resourceVersion")
            if want and want != meta_of(current)["resourceVersion"]:
                raise conflict(
                    res.plural,
                    name,
                    "the object has been modified; please apply your "
                    "changes to the latest version and try again",
                    res.group,
                )
            if meta_of(body).get("name", name) != name:
                raise ApiError(
                    400, "BadRequest", "the name of the object does not match the request"
                )
            return self._write(res, current, body, status, manager)

    def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        status: bool = False,
        manager: str = CONTROLLERS,
    ) -> Obj:
        with self._cond:
            current = self.get(res, namespace, name)
            kind = content_type.split(";")[0].strip()
            if kind == "application/merge-patch+json":
                patched = merge_patch(current, body)
            elif kind == "application/json-patch+json":
                patched = json_patch(copy.deepcopy(current), body)
            elif kind == "application/strategic-merge-patch+json":
                if not res.builtin:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media "
                        "types include: application/json-patch+json, application/merge-patch+json, "
                        "application/apply-patch+yaml",
                    )
                patched = strategic_merge_patch(current, body)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {kind!r}")
            if not isinstance(patched, dict):
                raise ApiError(422, "Invalid", "the patch did not produce an object")
            want = meta_of(patched).get("resourceVersion")
            if want and want != meta_of(current)["resourceVersion"]:
                raise conflict(
                    res.plural,
                    name,
                    "the object has been modified; please apply your "
                    "changes to the latest version and try again",
                    res.group,
                )
            return self._write(res, current, patched, status, manager)

    def _write(
        self, res: Resource, current: Obj, body: Obj, status: bool, manager: str = CONTROLLERS
    ) -> Obj:
        new = copy.deepcopy(body)
        old_meta = meta_of(current)
        if status:
            new = {**current, "status": new.get("status", {})}
        else:
            meta = new.setdefault("metadata", {})
            for frozen in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "generation",
            ):
                if frozen in old_meta:
                    meta[frozen] = old_meta[frozen]
                else:
                    meta.pop(frozen, None)
            if res.status:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
            if res.kind == "PyTorchJob":
                prune_pytorchjob(new, self.training_operator)
            if res.kind == "Secret":
                fold_string_data(new)
            if res.kind == "Job" and self.kueue is not None:
                self.kueue.check_update(current, new)
            if new.get("spec") != current.get("spec"):
                meta["generation"] = int(old_meta.get("generation", 1)) + 1
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        new["metadata"] = {
            **meta_of(new),
            "resourceVersion": old_meta["resourceVersion"],
            "managedFields": old_meta.get("managedFields") or [],
        }
        if res.kind == "Job" and new.get("status") != current.get("status"):
            problems = job_status_problems(current, new)
            if problems:
                raise invalid("Job", res.group, old_meta["name"], problems)
        if new == current:
            return current  # a no-op write changes nothing, not even the resourceVersion
        new["metadata"]["managedFields"] = managed_fields(
            new, old_meta.get("managedFields") or [], manager, res, self.clock.now(), status
        )
        new["metadata"]["resourceVersion"] = self._next_rv()
        key = (old_meta.get("namespace", ""), old_meta["name"])
        if meta_of(new).get("deletionTimestamp") and not meta_of(new).get("finalizers"):
            return self._remove(res, key, new)
        self._objects[res.key][key] = new
        self._index_owners(res, new, current)
        self._record("MODIFIED", res, new, current)
        return new

    def bind(self, namespace: str, name: str, node: str) -> None:
        pods = BY_KIND["Pod"]
        with self._cond:
            pod = self.get(pods, namespace, name)
            if pod.get("spec", {}).get("nodeName"):
                raise conflict(
                    "pods",
                    name,
                    f"pod {name} is already assigned to node {pod['spec']['nodeName']!r}",
                )
            patched = copy.deepcopy(pod)
            patched["spec"]["nodeName"] = node
            conditions = [
                c
                for c in patched.get("status", {}).get("conditions", [])
                if c.get("type") != "PodScheduled"
            ]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": timestamp(self.clock.now()),
                }
            )
            patched.setdefault("status", {})["conditions"] = conditions
            new = {**patched, "metadata": {**meta_of(pod), "resourceVersion": self._next_rv()}}
            key = (namespace, name)
            self._objects[pods.key][key] = new
            self._record("MODIFIED", pods, new, pod)


def _fields(value: Any, depth: int = 0) -> dict[str, Any]:
    """A FieldsV1 set: the fields of `value`, nested (list items counted as one)."""
    if depth > 6:
        return {}
    if isinstance(value, dict):
        return {f"f:{k}": _fields(v, depth + 1) for k, v in value.items() if k != "managedFields"}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return {".": {}, **_fields(value[0], depth + 1)}
    return {}


def managed_fields(
    obj: Obj,
    previous: list[Obj],
    manager: str,
    res: Resource,
    now: datetime,
    status: bool = False,
) -> list[Obj]:
    """metadata.managedFields after a write by `manager`: every write runs the field manager
    (apiserver pkg/endpoints/handlers create.go, update.go, patch.go), one Update entry per
    manager and subresource, at most ten."""
    sub = "status" if status else ""
    section = (
        {"f:status": _fields(obj.get("status"))}
        if status
        else _fields({k: v for k, v in obj.items() if k not in ("kind", "apiVersion", "status")})
    )
    entry = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": res.api_version,
        "time": timestamp(now),
        "fieldsType": "FieldsV1",
        "fieldsV1": section,
        **({"subresource": sub} if sub else {}),
    }
    kept = [e for e in previous if (e.get("manager"), e.get("subresource", "")) != (manager, sub)]
    return [*kept, entry][-MAX_UPDATE_MANAGERS:]
