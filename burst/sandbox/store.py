"""The sandbox API server's object store: Kubernetes semantics without etcd.

One global resourceVersion counter; uid, generation, creationTimestamp and generateName as the real
API server sets them; optimistic concurrency (409 on a stale resourceVersion); status
subresources; finalizers and deletionTimestamp; delete propagation; a bounded history of events
that watches resume from (older versions answer 410 Expired, as after an etcd compaction).

Stored objects are never mutated in place: every write stores a new dict, so readers (the HTTP
handlers, the watch streams, the simulated controllers) may hold references without copying.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import string
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from time import monotonic as _monotonic
from typing import Any

from burst.clock import Clock
from burst.quantity import quantity
from burst.sandbox.errors import ApiError, already_exists, conflict, not_found
from burst.sandbox.patch import json_patch, merge_patch, strategic_merge_patch
from burst.sandbox.resources import BY_KIND, RESOURCES, Resource
from burst.sandbox.selectors import field_matcher, label_matcher

Obj = dict[str, Any]
Listener = Callable[[str, Resource, Obj], None]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# batch/v1 Jobs keep their historical default: deleting one orphans its pods unless the client
# asks for Background or Foreground propagation.
ORPHAN_BY_DEFAULT = frozenset({"batch/jobs"})


def timestamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: Resource
    obj: Obj
    old: Obj | None


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class Store:
    def __init__(self, clock: Clock, history: int = 200_000, seed: int = 0) -> None:
        self.clock = clock
        self.history = history
        self._cond = threading.Condition(threading.RLock())
        # Seeded, for reproducible generated names and uids; not for anything secret.
        self._rng = random.Random(seed)  # noqa: S311
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._dependents: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
        self._uids: set[str] = set()
        self._log: list[Event] = []
        self._log_start = 1  # rv of self._log[0]
        self._listeners: list[Listener] = []
        self.reset()

    # -- bookkeeping --------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every object (the resourceVersion keeps counting, so old versions are gone)."""
        with self._cond:
            self._objects = {r.key: {} for r in RESOURCES}
            self._dependents.clear()
            self._uids.clear()
            self._log.clear()
            self._log_start = self._rv + 1
            for name in DEFAULT_NAMESPACES:
                self.create(BY_KIND["Namespace"], "", {"metadata": {"name": name}})
            self._cond.notify_all()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    @property
    def resource_version(self) -> int:
        return self._rv

    def _record(self, type_: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        self._log.append(Event(self._rv, type_, res, obj, old))
        if len(self._log) > self.history * 5 // 4:
            drop = len(self._log) - self.history
            del self._log[:drop]
            self._log_start += drop
        for listener in self._listeners:
            listener(type_, res, obj)
        self._cond.notify_all()

    def compact(self) -> None:
        """Drop the whole event history, as an etcd compaction would."""
        with self._cond:
            self._log_start += len(self._log)
            self._log.clear()

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _index_owners(self, res: Resource, obj: Obj, old: Obj | None) -> None:
        key = (res.key, _meta(obj).get("namespace", ""), _meta(obj)["name"])
        for ref in _meta(old or {}).get("ownerReferences") or []:
            self._dependents[ref.get("uid", "")].discard(key)
        if obj is not old:
            for ref in _meta(obj).get("ownerReferences") or []:
                self._dependents[ref.get("uid", "")].add(key)

    # -- reads --------------------------------------------------------------------------------

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        with self._cond:
            found = self._objects[res.key].get((namespace if res.namespaced else "", name))
            if found is None:
                raise not_found(res.plural, name, res.group)
            return found

    def find(self, res: Resource, namespace: str, name: str) -> Obj | None:
        with self._cond:
            return self._objects[res.key].get((namespace if res.namespaced else "", name))

    def objects(self, res: Resource) -> list[Obj]:
        with self._cond:
            return list(self._objects[res.key].values())

    def list_items(
        self,
        res: Resource,
        namespace: str = "",
        labels: str | None = None,
        fields: str | None = None,
        limit: int = 0,
        continue_: str | None = None,
    ) -> tuple[list[Obj], str, str | None, int | None]:
        """(items, resourceVersion, continue token, remaining item count) in (namespace, name) order."""
        label_ok, field_ok = label_matcher(labels), field_matcher(fields)
        with self._cond:
            start: tuple[str, str] | None = None
            if continue_:
                try:
                    token = json.loads(base64.urlsafe_b64decode(continue_.encode()))
                    start = (token["ns"], token["name"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "invalid continue token") from None
            rv = str(self._rv)
            keys = sorted(k for k in self._objects[res.key] if not namespace or k[0] == namespace)
            items = []
            for key in keys:
                if start is not None and key <= start:
                    continue
                obj = self._objects[res.key][key]
                if label_ok(_meta(obj).get("labels") or {}) and field_ok(obj):
                    items.append(obj)
        if limit and len(items) > limit:
            last = _meta(items[limit - 1])
            token = {"ns": last.get("namespace", ""), "name": last["name"]}
            encoded = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            return items[:limit], rv, encoded, len(items) - limit
        return items, rv, None, None

    # -- writes -------------------------------------------------------------------------------

    def create(self, res: Resource, namespace: str, body: Obj) -> Obj:
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
                if namespace and ("", namespace) not in self._objects["/namespaces"]:
                    raise not_found("namespaces", namespace)
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
                namespace = ""
            key = (namespace, meta["name"])
            if key in self._objects[res.key]:
                raise already_exists(res.plural, meta["name"], res.group)
            if res.kind == "Pod":
                self._admit_quota(namespace, obj)
            meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            meta["creationTimestamp"] = timestamp(self.clock.now())
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            _defaults(res, obj)
            meta["resourceVersion"] = self._next_rv()
            self._objects[res.key][key] = obj
            self._uids.add(meta["uid"])
            self._index_owners(res, obj, None)
            self._record("ADDED", res, obj, None)
            return obj

    def _admit_quota(self, namespace: str, pod: Obj) -> None:
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
        for quota in self._objects["/resourcequotas"].values():
            if _meta(quota).get("namespace") != namespace:
                continue
            hard = (
                (quota.get("status") or {}).get("hard")
                or (quota.get("spec") or {}).get("hard")
                or {}
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

    def replace(
        self, res: Resource, namespace: str, name: str, body: Obj, status: bool = False
    ) -> Obj:
        """PUT: the whole object (or, with `status`, only its status)."""
        with self._cond:
            current = self.get(res, namespace, name)
            want = _meta(body).get("resourceVersion")
            if want and want != _meta(current)["resourceVersion"]:
                raise conflict(
                    res.plural,
                    name,
                    "the object has been modified; please apply your "
                    "changes to the latest version and try again",
                    res.group,
                )
            if _meta(body).get("name", name) != name:
                raise ApiError(
                    400, "BadRequest", "the name of the object does not match the request"
                )
            return self._write(res, current, body, status)

    def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        status: bool = False,
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
            want = _meta(patched).get("resourceVersion")
            if want and want != _meta(current)["resourceVersion"]:
                raise conflict(
                    res.plural,
                    name,
                    "the object has been modified; please apply your "
                    "changes to the latest version and try again",
                    res.group,
                )
            return self._write(res, current, patched, status)

    def _write(self, res: Resource, current: Obj, body: Obj, status: bool) -> Obj:
        new = copy.deepcopy(body)
        old_meta = _meta(current)
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
            if new.get("spec") != current.get("spec"):
                meta["generation"] = int(old_meta.get("generation", 1)) + 1
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        new["metadata"] = {**_meta(new), "resourceVersion": old_meta["resourceVersion"]}
        if new == current:
            return current  # a no-op write changes nothing, not even the resourceVersion
        new["metadata"]["resourceVersion"] = self._next_rv()
        key = (old_meta.get("namespace", ""), old_meta["name"])
        if _meta(new).get("deletionTimestamp") and not _meta(new).get("finalizers"):
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
            new = {**patched, "metadata": {**_meta(pod), "resourceVersion": self._next_rv()}}
            key = (namespace, name)
            self._objects[pods.key][key] = new
            self._record("MODIFIED", pods, new, pod)

    def delete(
        self,
        res: Resource,
        namespace: str,
        name: str,
        propagation: str | None = None,
        precondition_uid: str | None = None,
        precondition_rv: str | None = None,
    ) -> Obj:
        with self._cond:
            current = self.get(res, namespace, name)
            meta = _meta(current)
            if precondition_uid and precondition_uid != meta["uid"]:
                raise conflict(
                    res.plural,
                    name,
                    "Precondition failed: UID in precondition: "
                    f"{precondition_uid}, UID in object meta: {meta['uid']}",
                    res.group,
                )
            if precondition_rv and precondition_rv != meta["resourceVersion"]:
                raise conflict(
                    res.plural,
                    name,
                    "Precondition failed: ResourceVersion in precondition: "
                    f"{precondition_rv}, ResourceVersion in object meta: "
                    f"{meta['resourceVersion']}",
                    res.group,
                )
            if propagation is None:
                propagation = "Orphan" if res.key in ORPHAN_BY_DEFAULT else "Background"
            if propagation not in ("Orphan", "Background", "Foreground"):
                raise ApiError(400, "BadRequest", f"unknown propagationPolicy {propagation!r}")
            finalizers = list(meta.get("finalizers") or [])
            if propagation == "Foreground" and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if propagation == "Orphan":
                self._orphan_dependents(meta["uid"])
            if finalizers:
                if meta.get("deletionTimestamp") and finalizers == meta.get("finalizers"):
                    return current
                marked = {
                    **current,
                    "metadata": {
                        **meta,
                        "finalizers": finalizers,
                        "deletionTimestamp": meta.get("deletionTimestamp")
                        or timestamp(self.clock.now()),
                        "deletionGracePeriodSeconds": 0,
                        "resourceVersion": self._next_rv(),
                    },
                }
                self._objects[res.key][(meta.get("namespace", ""), name)] = marked
                self._record("MODIFIED", res, marked, current)
                return marked
            gone = {**current, "metadata": {**meta, "resourceVersion": self._next_rv()}}
            return self._remove(res, (meta.get("namespace", ""), name), gone)

    def _remove(self, res: Resource, key: tuple[str, str], final: Obj) -> Obj:
        current = self._objects[res.key].pop(key)
        self._uids.discard(_meta(current)["uid"])
        self._index_owners(res, current, current)
        self._record("DELETED", res, final, current)
        if res.kind == "Namespace":
            for other in RESOURCES:
                if other.namespaced:
                    for k in [k for k in self._objects[other.key] if k[0] == key[1]]:
                        obj = self._objects[other.key].pop(k)
                        self._uids.discard(_meta(obj)["uid"])
                        self._index_owners(other, obj, obj)
                        final_obj = {
                            **obj,
                            "metadata": {**_meta(obj), "resourceVersion": self._next_rv()},
                        }
                        self._record("DELETED", other, final_obj, obj)
        return final

    def _orphan_dependents(self, uid: str) -> None:
        for res_key, namespace, name in sorted(self._dependents.get(uid, ())):
            res = next(r for r in RESOURCES if r.key == res_key)
            obj = self._objects[res_key].get((namespace, name))
            if obj is None:
                continue
            refs = [r for r in _meta(obj).get("ownerReferences") or [] if r.get("uid") != uid]
            self._write(
                res, obj, {**obj, "metadata": {**_meta(obj), "ownerReferences": refs}}, False
            )

    def dependents(self, uid: str) -> list[tuple[Resource, Obj]]:
        with self._cond:
            out = []
            for res_key, namespace, name in sorted(self._dependents.get(uid, ())):
                obj = self._objects[res_key].get((namespace, name))
                if obj is not None:
                    out.append((next(r for r in RESOURCES if r.key == res_key), obj))
            return out

    def uid_exists(self, uid: str) -> bool:
        with self._cond:
            return uid in self._uids

    # -- watch --------------------------------------------------------------------------------

    def watch(
        self,
        res: Resource,
        namespace: str,
        resource_version: str | None,
        labels: str | None,
        fields: str | None,
        stop: threading.Event,
        timeout: float,
        bookmark_every: float | None,
    ) -> Iterator[tuple[str, Obj]]:
        """Yield (type, object) from `resource_version` on; ERROR 410 when it is compacted away."""
        label_ok, field_ok = label_matcher(labels), field_matcher(fields)

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            meta = _meta(obj)
            return (
                (not namespace or meta.get("namespace") == namespace)
                and label_ok(meta.get("labels") or {})
                and field_ok(obj)
            )

        with self._cond:
            if resource_version in (None, "", "0"):
                items, rv, _, _ = self.list_items(res, namespace, labels, fields)
                initial = [("ADDED", o) for o in items]
                position = int(rv)
            else:
                try:
                    position = int(resource_version or 0)
                except ValueError:
                    raise ApiError(
                        400, "BadRequest", f"invalid resourceVersion {resource_version!r}"
                    ) from None
                initial = []  # a compacted version is answered 410 by the loop below
        yield from initial
        deadline = _monotonic() + timeout
        next_bookmark = _monotonic() + bookmark_every if bookmark_every else None
        while not stop.is_set():
            batch: list[tuple[str, Obj]] = []
            with self._cond:
                index = position + 1 - self._log_start
                if index < 0:
                    yield (
                        "ERROR",
                        ApiError(
                            410,
                            "Expired",
                            f"too old resource version: {position} ({self._log_start - 1})",
                        ).status(),
                    )
                    return
                if index >= len(self._log):
                    wait = deadline - _monotonic()
                    if next_bookmark is not None:
                        wait = min(wait, next_bookmark - _monotonic())
                    if wait > 0:
                        self._cond.wait(min(wait, 0.5))
                    index = position + 1 - self._log_start
                for event in self._log[max(index, 0) :]:
                    position = event.rv
                    if event.resource is not res:
                        continue
                    now_in, was_in = matches(event.obj), matches(event.old)
                    if event.type == "MODIFIED" and now_in != was_in:
                        batch.append(("ADDED", event.obj) if now_in else ("DELETED", event.obj))
                    elif now_in or (event.type == "DELETED" and was_in):
                        batch.append((event.type, event.obj))
                current_rv = self._rv
            yield from batch
            now = _monotonic()
            if now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                yield (
                    "BOOKMARK",
                    {
                        "kind": res.kind,
                        "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(max(position, current_rv))},
                    },
                )
                position = max(position, current_rv)
                next_bookmark = now + (bookmark_every or 0)


def _defaults(res: Resource, obj: Obj) -> None:
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
