"""The sandbox API server's object store: Kubernetes semantics without etcd.

One global resourceVersion counter; uid, generation, creationTimestamp and generateName as the real
API server sets them; optimistic concurrency (409 on a stale resourceVersion); status
subresources; finalizers and deletionTimestamp; delete propagation; a bounded history of events
that watches resume from (older versions answer 410 Expired, as after an etcd compaction).

Stored objects are never mutated in place: every write stores a new dict, so readers (the HTTP
handlers, the watch streams, the simulated controllers) may hold references without copying.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from time import monotonic as _monotonic

from burst.clock import Clock
from burst.sandbox.crds import LATEST
from burst.sandbox.errors import ApiError, conflict
from burst.sandbox.objects import DEFAULT_NAMESPACES, ORPHAN_BY_DEFAULT, Obj, meta_of, timestamp
from burst.sandbox.resources import BY_KIND, RESOURCES, Resource
from burst.sandbox.selectors import field_matcher, label_matcher
from burst.sandbox.writes import Writes

__all__ = ["Obj", "Store", "timestamp"]


class Store(Writes):
    def __init__(
        self, clock: Clock, history: int = 200_000, seed: int = 0, training_operator: str = LATEST
    ) -> None:
        super().__init__(clock, history, seed, training_operator)
        self.reset()

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
            meta = meta_of(current)
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
            if res.kind == "Namespace" and (current.get("spec") or {}).get("finalizers"):
                # Its spec finalizer holds it Terminating until the namespace controller has
                # deleted everything in it (pkg/controller/namespace).
                if meta.get("deletionTimestamp"):
                    return current
                terminating = {
                    **current,
                    "metadata": {
                        **meta,
                        "deletionTimestamp": timestamp(self.clock.now()),
                        "resourceVersion": self._next_rv(),
                    },
                    "status": {"phase": "Terminating"},
                }
                self._objects[res.key][("", name)] = terminating
                self._record("MODIFIED", res, terminating, current)
                return terminating
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

    def _orphan_dependents(self, uid: str) -> None:
        for res_key, namespace, name in sorted(self._dependents.get(uid, ())):
            res = next(r for r in RESOURCES if r.key == res_key)
            obj = self._objects[res_key].get((namespace, name))
            if obj is None:
                continue
            refs = [r for r in meta_of(obj).get("ownerReferences") or [] if r.get("uid") != uid]
            self._write(
                res, obj, {**obj, "metadata": {**meta_of(obj), "ownerReferences": refs}}, False
            )

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
            meta = meta_of(obj)
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

    def content_of(self, namespace: str) -> list[tuple[Resource, Obj]]:
        """Everything stored in `namespace`, for the namespace controller."""
        with self._cond:
            return [
                (res, obj)
                for res in RESOURCES
                if res.namespaced
                for (ns, _), obj in list(self._objects[res.key].items())
                if ns == namespace
            ]

    def finalize_namespace(self, name: str) -> None:
        """The namespace controller's last step: an empty terminating namespace goes."""
        namespaces = BY_KIND["Namespace"]
        with self._cond:
            current = self._objects[namespaces.key].get(("", name))
            if current is None or not meta_of(current).get("deletionTimestamp"):
                return
            gone = {**current, "metadata": {**meta_of(current), "resourceVersion": self._next_rv()}}
            self._remove(namespaces, ("", name), gone)
