"""The sandbox's simulated control plane, the part every controller shares: one thread that wakes on
store changes (the store notifies it) and on the clock, the garbage collector (dependents of deleted
owners, foreground deletion), and the small writes controllers make (status, Events, pods).
workloads.py holds the Job and PyTorchJob controllers, controllers.py the scheduler and kubelet."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from burst.clock import Clock
from burst.kube.quantity import quantity
from burst.sandbox.errors import ApiError
from burst.sandbox.resources import BY_KIND, Resource
from burst.sandbox.store import Obj, Store, timestamp

log = logging.getLogger(__name__)
DURATION = "sandbox.burst.dev/duration"
EXIT_CODE = "sandbox.burst.dev/exit-code"
JOB_CONTROLLER = "kubernetes.io/job-controller"
# The Job controller's wait before it replaces a failed pod: its first, and its most
# (pkg/controller/job/job_controller.go DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff).
POD_FAILURE_BACKOFF = (10.0, 600.0)
GPU = "nvidia.com/gpu"
PODS, NODES, JOBS, PYTORCHJOBS, EVENTS = (
    BY_KIND[k] for k in ("Pod", "Node", "Job", "PyTorchJob", "Event")
)
TERMINAL = ("Succeeded", "Failed")


def _meta(obj: Obj) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def pod_requests(pod: Obj) -> dict[str, float]:
    total: dict[str, float] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        resources = c.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in wanted.items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return total


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(r.get("uid") == uid for r in _meta(obj).get("ownerReferences") or [])


def _owner_ref(owner: Obj) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": _meta(owner)["name"],
        "uid": _meta(owner)["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _condition(type_: str, status: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    stamp = timestamp(now)
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


def _set_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in conditions:
        if c.get("type") == new["type"]:
            if c.get("status") == new["status"] and c.get("reason") == new["reason"]:
                return conditions  # unchanged: keep the transition time
            continue
        out.append(c)
    return [*out, new]


class ControllerBase:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        tick: float = 0.05,
        default_duration: float = 30.0,
        pod_failure_backoff: tuple[float, float] = POD_FAILURE_BACKOFF,
    ) -> None:
        self.store, self.clock, self.tick = store, clock, tick
        self.default_duration = default_duration
        self.pod_failure_backoff = pod_failure_backoff
        self._lock = threading.Lock()
        self._rounds, self._rounded = 0, threading.Condition()  # rounds run, for settle()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dirty: set[tuple[str, str, str]] = set()
        self._foreground: set[tuple[str, str, str]] = set()  # owners deleting in the foreground
        self._reschedule = False
        self._running: list[tuple[datetime, str, str, str]] = []  # (end, namespace, name, uid)
        # Finished Jobs and PyTorchJobs with a TTL, by (kind, namespace, name): when they go
        self._expiring: dict[tuple[str, str, str], datetime] = {}
        # Jobs waiting out a pod failure backoff, by (namespace, name): when to look again
        self._backing_off: dict[tuple[str, str], datetime] = {}
        # Pods whose containers crashed, by uid: the kubelet's back-off and when it last grew
        self._crash_loops: dict[str, tuple[float, datetime]] = {}
        self._thread = threading.Thread(
            target=self._loop, name="sandbox-control-plane", daemon=True
        )
        store.subscribe(self._notify)

    # -- lifecycle --

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)

    def reset(self) -> None:
        with self._lock:
            self._dirty.clear()
            self._foreground.clear()
            self._running.clear()
            self._expiring.clear()
            self._backing_off.clear()
            self._crash_loops.clear()

    def _notify(self, type_: str, res: Resource, obj: Obj) -> None:
        meta = _meta(obj)
        with self._lock:
            self._dirty.add((res.kind, meta.get("namespace", ""), meta.get("name", "")))
            if res.kind == "Node" or (
                res.kind == "Pod"
                and (type_ == "DELETED" or (obj.get("status") or {}).get("phase") in TERMINAL)
            ):
                self._reschedule = True  # room may have appeared
            for ref in meta.get("ownerReferences") or []:
                self._dirty.add(
                    (ref.get("kind", ""), meta.get("namespace", ""), ref.get("name", ""))
                )
            if type_ == "DELETED":
                self._dirty.add(("deleted-owner", meta.get("uid", ""), ""))
            elif meta.get("deletionTimestamp") and "foregroundDeletion" in (
                meta.get("finalizers") or []
            ):
                self._foreground.add((res.kind, meta.get("namespace", ""), meta.get("name", "")))
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.tick)
            self._wake.clear()
            try:
                self.step()
            except ApiError:
                self._wake.set()  # a conflict with a concurrent writer: try again next round
            except Exception:
                # A control plane that dies silently would hang every test on it: say why, go on.
                log.exception("sandbox control plane step failed")
                self._wake.set()
            with self._rounded:
                self._rounds += 1
                self._rounded.notify_all()

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until a whole round has run since this call: what the clock and the store asked
        of the controllers by now is done. A test's way to see that something did not happen
        (its clock moved short of a deadline), waiting on the rounds rather than on time."""
        with self._rounded:
            # The round under way may have read the clock before the caller moved it.
            target = self._rounds + 2
            if not self._rounded.wait_for(lambda: self._rounds >= target, timeout):
                raise TimeoutError(f"the control plane ran no round in {timeout} s")

    def step(self) -> None:
        """One round of every controller (controllers.py)."""
        raise NotImplementedError

    # -- garbage collection --

    def _collect_garbage(self, deleted_uids: Iterable[str]) -> None:
        for uid in deleted_uids:
            for res, obj in self.store.dependents(uid):
                refs = _meta(obj).get("ownerReferences") or []
                if all(not self.store.uid_exists(r.get("uid", "")) for r in refs):
                    self._delete(res, obj, "Background")
        with self._lock:
            foreground, self._foreground = self._foreground, set()
        for kind, namespace, name in sorted(foreground):
            res = BY_KIND[kind]
            owner = self.store.find(res, namespace, name)
            if owner is not None:
                meta = _meta(owner)
                children = self.store.dependents(meta["uid"])
                for child_res, child in children:
                    self._delete(child_res, child, "Foreground")
                if children:
                    with self._lock:  # look again once they are gone
                        self._foreground.add((kind, namespace, name))
                else:
                    finalizers = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
                    self._update(res, {**owner, "metadata": {**meta, "finalizers": finalizers}})

    def _delete(self, res: Resource, obj: Obj, propagation: str) -> None:
        try:
            self.store.delete(res, _meta(obj).get("namespace", ""), _meta(obj)["name"], propagation)
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _update(self, res: Resource, obj: Obj, status: bool = False) -> Obj | None:
        try:
            return self.store.replace(
                res, _meta(obj).get("namespace", ""), _meta(obj)["name"], obj, status=status
            )
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def _event(self, involved: Obj, type_: str, reason: str, message: str) -> None:
        meta = _meta(involved)
        now = timestamp(self.clock.now())
        self.store.create(
            EVENTS,
            meta["namespace"],
            {
                "metadata": {"generateName": f"{meta['name']}."},
                "involvedObject": {
                    "kind": involved["kind"],
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "apiVersion": involved["apiVersion"],
                },
                "type": type_,
                "reason": reason,
                "message": message,
                "count": 1,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "source": {"component": "sandbox-controller-manager"},
            },
        )

    # -- what controllers write --

    def _pods_of(self, owner: Obj) -> list[Obj]:
        uid = _meta(owner)["uid"]
        return [
            obj for res, obj in self.store.dependents(uid) if res is PODS and _owned_by(obj, uid)
        ]

    def _create_pod(
        self,
        owner: Obj,
        template: dict[str, Any],
        generate_name: str,
        labels: dict[str, str],
        name: str | None = None,
    ) -> Obj:
        tmeta = template.get("metadata") or {}
        meta: dict[str, Any] = {
            "labels": {**(tmeta.get("labels") or {}), **labels},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [_owner_ref(owner)],
        }
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = generate_name
        return self.store.create(
            PODS,
            _meta(owner)["namespace"],
            {"metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})},
        )

    def _write_status(self, res: Resource, obj: Obj, status: dict[str, Any]) -> None:
        if status != obj.get("status"):
            self._update(res, {**obj, "status": status}, status=True)


def parse_stamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
