"""The sandbox store's state and reads: objects by resource, uids and owner index, one global
resourceVersion, and the bounded event history that watches resume from (older versions answer
410 Expired, as after an etcd compaction). writes.py and store.py build the writes on it."""

from __future__ import annotations

import base64
import json
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from burst.clock import Clock
from burst.sandbox.crds import LATEST, run_policy_fields
from burst.sandbox.errors import ApiError, not_found
from burst.sandbox.kueue import Kueue
from burst.sandbox.resources import RESOURCES, Resource
from burst.sandbox.selectors import field_matcher, label_matcher

Obj = dict[str, Any]
Listener = Callable[[str, Resource, Obj], None]
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter."
)
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


def meta_of(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class ObjectState:
    """The objects, their uids and owners, the global resourceVersion and the event history."""

    def __init__(
        self, clock: Clock, history: int = 200_000, seed: int = 0, training_operator: str = LATEST
    ) -> None:
        self.clock = clock
        self.history = history
        run_policy_fields(training_operator)  # an unknown version is refused here
        self.training_operator = training_operator
        self.kueue: Kueue | None = None  # installed by Sandbox(kueue_quotas=...)
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

    # -- bookkeeping --------------------------------------------------------------------------

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
        key = (res.key, meta_of(obj).get("namespace", ""), meta_of(obj)["name"])
        for ref in meta_of(old or {}).get("ownerReferences") or []:
            self._dependents[ref.get("uid", "")].discard(key)
        if obj is not old:
            for ref in meta_of(obj).get("ownerReferences") or []:
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
            rv = str(self._rv)
            if continue_:
                try:
                    token = json.loads(base64.urlsafe_b64decode(continue_.encode()))
                    start, rv = (token["ns"], token["name"]), str(token["rv"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "invalid continue token") from None
                if int(rv) < self._log_start - 1:
                    # The snapshot the pages come from was compacted away (apiserver
                    # pkg/storage/etcd3/errors.go): start a new list.
                    raise ApiError(410, "Expired", CONTINUE_EXPIRED)
            keys = sorted(k for k in self._objects[res.key] if not namespace or k[0] == namespace)
            items = []
            for key in keys:
                if start is not None and key <= start:
                    continue
                obj = self._objects[res.key][key]
                if label_ok(meta_of(obj).get("labels") or {}) and field_ok(obj):
                    items.append(obj)
        if limit and len(items) > limit:
            last = meta_of(items[limit - 1])
            token = {"ns": last.get("namespace", ""), "name": last["name"], "rv": int(rv)}
            encoded = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            return items[:limit], rv, encoded, len(items) - limit
        return items, rv, None, None

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

    def _remove(self, res: Resource, key: tuple[str, str], final: Obj) -> Obj:
        current = self._objects[res.key].pop(key)
        self._uids.discard(meta_of(current)["uid"])
        self._index_owners(res, current, current)
        self._record("DELETED", res, final, current)
        if res.kind == "Namespace":
            for other in RESOURCES:
                if other.namespaced:
                    for k in [k for k in self._objects[other.key] if k[0] == key[1]]:
                        obj = self._objects[other.key].pop(k)
                        self._uids.discard(meta_of(obj)["uid"])
                        self._index_owners(other, obj, obj)
                        final_obj = {
                            **obj,
                            "metadata": {**meta_of(obj), "resourceVersion": self._next_rv()},
                        }
                        self._record("DELETED", other, final_obj, obj)
        return final
