"""The sandbox's simulated control plane: small loops over the same store as the API server.

- Job controller: pods from the template up to parallelism/completions, backoffLimit, `suspend`,
  and it leaves alone a Job whose `spec.managedBy` names another controller.
- PyTorchJob controller: master and worker pods, `runPolicy.suspend`, Kubeflow-style conditions.
- Scheduler: binds pending pods to nodes with free `nvidia.com/gpu`, CPU and memory, honouring node
  selectors, required node affinity, taints and tolerations; marks the others
  `PodScheduled=False, reason=Unschedulable` with the real scheduler's kind of message.
- Kubelet: runs a bound pod for its `sandbox.burst.dev/duration` on the Clock, then Succeeded or
  Failed by `sandbox.burst.dev/exit-code`; a deleted node fails its pods (a spot interruption).
- Garbage collector: dependents of deleted owners (background), foreground deletion.

Every loop reacts to store changes (the store calls `notify`) and to the clock (one tick every
`tick` seconds). Each reconcile is idempotent, as real controllers are.
"""

from __future__ import annotations

import copy
import heapq
import logging
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from burst.clock import Clock
from burst.duration import DurationError, parse_duration
from burst.quantity import quantity
from burst.sandbox.errors import ApiError
from burst.sandbox.resources import BY_KIND, Resource
from burst.sandbox.store import Obj, Store, timestamp

log = logging.getLogger(__name__)
DURATION = "sandbox.burst.dev/duration"
EXIT_CODE = "sandbox.burst.dev/exit-code"
JOB_CONTROLLER = "kubernetes.io/job-controller"
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


class ControlPlane:
    def __init__(
        self, store: Store, clock: Clock, tick: float = 0.05, default_duration: float = 30.0
    ) -> None:
        self.store, self.clock, self.tick = store, clock, tick
        self.default_duration = default_duration
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dirty: set[tuple[str, str, str]] = set()
        self._foreground: set[tuple[str, str, str]] = set()  # owners deleting in the foreground
        self._reschedule = False
        self._running: list[tuple[datetime, str, str, str]] = []  # (end, namespace, name, uid)
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

    def step(self) -> None:
        """One round of every controller over what changed, and of the kubelet over the clock."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            reschedule, self._reschedule = self._reschedule, False
        deleted_uids = {ns for kind, ns, _ in dirty if kind == "deleted-owner"}
        for kind, namespace, name in sorted(dirty):
            if kind == "Job":
                self._job(namespace, name)
            elif kind == "PyTorchJob":
                self._pytorchjob(namespace, name)
            elif kind == "Node":
                self._node(name)
        self._collect_garbage(deleted_uids)
        # Pods that did not fit wait until room may have appeared (a node came, a pod ended).
        if reschedule:
            candidates = self.store.objects(PODS)
        else:
            found = (self.store.find(PODS, ns, name) for kind, ns, name in dirty if kind == "Pod")
            candidates = [p for p in found if p is not None]
        pending = [p for p in candidates if self._needs_scheduling(p)]
        if pending:
            self._schedule(pending)
        for kind, namespace, name in sorted(dirty):
            if kind == "Pod":
                self._kubelet_start(namespace, name)
        self._kubelet_finish()

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

    # -- Job --

    def _pods_of(self, owner: Obj) -> list[Obj]:
        uid = _meta(owner)["uid"]
        return [
            obj for res, obj in self.store.dependents(uid) if res is PODS and _owned_by(obj, uid)
        ]

    def _job(self, namespace: str, name: str) -> None:
        job = self.store.find(JOBS, namespace, name)
        if job is None or _meta(job).get("deletionTimestamp"):
            return
        spec = job.get("spec") or {}
        if spec.get("managedBy") not in (None, JOB_CONTROLLER):
            return  # another controller (e.g. MultiKueue) owns this Job's status and pods
        status = copy.deepcopy(job.get("status") or {})
        conditions = status.get("conditions") or []
        if any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in conditions
        ):
            return
        now = self.clock.now()
        pods = self._pods_of(job)
        active = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in TERMINAL
            and not _meta(p).get("deletionTimestamp")
        ]
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        if spec.get("suspend"):
            for pod in active:
                self._delete(PODS, pod, "Background")
            status["conditions"] = _set_condition(
                conditions, _condition("Suspended", "True", "JobSuspended", "Job suspended", now)
            )
            status["active"] = 0
            self._write_status(JOBS, job, status)
            return
        if conditions and any(
            c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions
        ):
            conditions = _set_condition(
                conditions, _condition("Suspended", "False", "JobResumed", "Job resumed", now)
            )
        status.setdefault("startTime", timestamp(now))
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        done = (
            succeeded >= completions if completions is not None else (succeeded > 0 and not active)
        )
        if failed > int(spec.get("backoffLimit", 6)):
            for pod in active:
                self._delete(PODS, pod, "Background")
            conditions = _set_condition(
                conditions,
                _condition(
                    "Failed",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    now,
                ),
            )
            self._event(
                job,
                "Warning",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
            active = []
        elif done:
            conditions = _set_condition(
                conditions,
                _condition(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    now,
                ),
            )
            conditions = _set_condition(
                conditions,
                _condition(
                    "Complete",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    now,
                ),
            )
            status["completionTime"] = timestamp(now)
            self._event(job, "Normal", "Completed", "Job completed")
        else:
            remaining = (completions - succeeded) if completions is not None else 1
            want = (
                min(parallelism, remaining)
                if completions is not None
                else (parallelism if not succeeded else 0)
            )
            for _ in range(max(0, want - len(active))):
                try:
                    active.append(
                        self._create_pod(job, (spec.get("template") or {}), f"{name}-", {})
                    )
                except ApiError as exc:
                    if exc.code != 403:
                        raise
                    # Refused by a ResourceQuota: the real job controller reports and waits.
                    self._event(job, "Warning", "FailedCreate", f"Error creating: {exc.message}")
                    break
        status.update(
            active=len(active),
            succeeded=succeeded,
            failed=failed,
            ready=sum(1 for p in active if (p.get("status") or {}).get("phase") == "Running"),
        )
        if conditions:
            status["conditions"] = conditions
        self._write_status(JOBS, job, status)

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

    # -- PyTorchJob --

    def _pytorchjob(self, namespace: str, name: str) -> None:
        job = self.store.find(PYTORCHJOBS, namespace, name)
        if job is None or _meta(job).get("deletionTimestamp"):
            return
        spec = job.get("spec") or {}
        status = copy.deepcopy(job.get("status") or {})
        conditions = status.get("conditions") or []
        if any(
            c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
            for c in conditions
        ):
            return
        now = self.clock.now()
        pods = self._pods_of(job)
        if not conditions:
            conditions = [
                _condition(
                    "Created", "True", "PyTorchJobCreated", f"PyTorchJob {name} is created.", now
                )
            ]
        if (spec.get("runPolicy") or {}).get("suspend"):
            for running in pods:
                if (running.get("status") or {}).get("phase") not in TERMINAL:
                    self._delete(PODS, running, "Background")
            conditions = _set_condition(
                conditions,
                _condition(
                    "Suspended",
                    "True",
                    "PyTorchJobSuspended",
                    f"PyTorchJob {name} is suspended.",
                    now,
                ),
            )
            status["conditions"] = conditions
            self._write_status(PYTORCHJOBS, job, status)
            return
        replicas = spec.get("pytorchReplicaSpecs") or {}
        by_name = {_meta(p)["name"]: p for p in pods}
        replica_statuses: dict[str, dict[str, int]] = {}
        for rtype, rspec in sorted(replicas.items()):
            counts = {"active": 0, "succeeded": 0, "failed": 0}
            for index in range(int((rspec or {}).get("replicas", 1))):
                pod_name = f"{name}-{rtype.lower()}-{index}"
                pod = by_name.get(pod_name)
                if pod is None:
                    labels = {
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/replica-type": rtype.lower(),
                        "training.kubeflow.org/replica-index": str(index),
                        "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    }
                    pod = self._create_pod(
                        job, (rspec or {}).get("template") or {}, "", labels, pod_name
                    )
                phase = (pod.get("status") or {}).get("phase")
                key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase or "", "active")
                counts[key] += 1
            replica_statuses[rtype] = counts
        status["replicaStatuses"] = replica_statuses
        status.setdefault("startTime", timestamp(now))
        master = replica_statuses.get("Master")
        if any(c["failed"] for c in replica_statuses.values()):
            conditions = _set_condition(
                conditions,
                _condition(
                    "Failed", "True", "PyTorchJobFailed", f"PyTorchJob {name} has failed.", now
                ),
            )
            status["completionTime"] = timestamp(now)
        elif master and master["succeeded"] >= 1:
            conditions = _set_condition(
                conditions,
                _condition(
                    "Running",
                    "False",
                    "PyTorchJobSucceeded",
                    f"PyTorchJob {name} is successfully completed.",
                    now,
                ),
            )
            conditions = _set_condition(
                conditions,
                _condition(
                    "Succeeded",
                    "True",
                    "PyTorchJobSucceeded",
                    f"PyTorchJob {name} is successfully completed.",
                    now,
                ),
            )
            status["completionTime"] = timestamp(now)
        elif any(p.get("status", {}).get("phase") == "Running" for p in pods):
            conditions = _set_condition(
                conditions,
                _condition(
                    "Running", "True", "PyTorchJobRunning", f"PyTorchJob {name} is running.", now
                ),
            )
        status["conditions"] = conditions
        self._write_status(PYTORCHJOBS, job, status)

    # -- scheduler --

    @staticmethod
    def _needs_scheduling(pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and not _meta(pod).get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Pending"
            and spec.get("schedulerName", "default-scheduler") == "default-scheduler"
        )

    def _free(self) -> dict[str, dict[str, float]]:
        free: dict[str, dict[str, float]] = {}
        for node in self.store.objects(NODES):
            status = node.get("status") or {}
            alloc = status.get("allocatable") or status.get("capacity") or {}
            free[_meta(node)["name"]] = {k: quantity(v) for k, v in alloc.items()}
        for pod in self.store.objects(PODS):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name in free and (pod.get("status") or {}).get("phase") not in TERMINAL:
                for k, v in pod_requests(pod).items():
                    free[node_name][k] = free[node_name].get(k, 0.0) - v
        return free

    def _schedule(self, pending: list[Obj]) -> None:
        nodes = sorted(self.store.objects(NODES), key=lambda n: _meta(n)["name"])
        free = self._free() if nodes else {}  # no nodes: nothing to add up over every pod
        pending.sort(key=lambda p: (_meta(p).get("creationTimestamp", ""), _meta(p)["name"]))
        for pod in pending:
            wanted = pod_requests(pod)
            reasons: dict[str, int] = {}
            chosen = None
            for node in nodes:
                why = _unfit(pod, node, wanted, free.get(_meta(node)["name"], {}))
                if why is None:
                    chosen = node
                    break
                reasons[why] = reasons.get(why, 0) + 1
            meta = _meta(pod)
            if chosen is not None:
                name = _meta(chosen)["name"]
                try:
                    self.store.bind(meta["namespace"], meta["name"], name)
                except ApiError:
                    continue
                for k, v in wanted.items():
                    free[name][k] = free[name].get(k, 0.0) - v
                continue
            detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            message = f"0/{len(nodes)} nodes are available" + (f": {detail}." if detail else ".")
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(
                c.get("type") == "PodScheduled" and c.get("message") == message for c in conditions
            ):
                continue
            cond = _condition("PodScheduled", "False", "Unschedulable", message, self.clock.now())
            cond.pop("lastProbeTime")
            status = {**(pod.get("status") or {}), "conditions": _set_condition(conditions, cond)}
            self._write_status(PODS, pod, status)

    # -- kubelet --

    def _kubelet_start(self, namespace: str, name: str) -> None:
        pod = self.store.find(PODS, namespace, name)
        if pod is None or not (pod.get("spec") or {}).get("nodeName"):
            return
        status = pod.get("status") or {}
        if status.get("phase") != "Pending":
            return
        if self.store.find(NODES, "", pod["spec"]["nodeName"]) is None:
            return
        now = self.clock.now()
        annotations = _meta(pod).get("annotations") or {}
        seconds = _seconds(annotations.get(DURATION), self.default_duration)
        containers = (pod.get("spec") or {}).get("containers") or []
        running = {
            **status,
            "phase": "Running",
            "startTime": timestamp(now),
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "conditions": _set_condition(
                status.get("conditions") or [], _condition("Ready", "True", "", "", now)
            ),
            "containerStatuses": [
                {
                    "name": c.get("name", "main"),
                    "image": c.get("image", ""),
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "imageID": "",
                    "containerID": "sandbox://",
                    "state": {"running": {"startedAt": timestamp(now)}},
                }
                for c in containers
            ],
        }
        if self._update(PODS, {**pod, "status": running}, status=True) is not None:
            heapq.heappush(
                self._running,
                (now + timedelta(seconds=seconds), namespace, name, _meta(pod)["uid"]),
            )

    def _kubelet_finish(self) -> None:
        now = self.clock.now()
        while self._running and self._running[0][0] <= now:
            _, namespace, name, uid = heapq.heappop(self._running)
            pod = self.store.find(PODS, namespace, name)
            if (
                pod is None
                or _meta(pod)["uid"] != uid
                or (pod.get("status") or {}).get("phase") != "Running"
            ):
                continue
            code = int((_meta(pod).get("annotations") or {}).get(EXIT_CODE, 0))
            self._terminate(pod, code, "Completed" if code == 0 else "Error", now)

    def _terminate(self, pod: Obj, code: int, reason: str, now: datetime) -> None:
        status = copy.deepcopy(pod.get("status") or {})
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        for cs in status.get("containerStatuses") or []:
            started = (cs.get("state") or {}).get("running", {}).get("startedAt", timestamp(now))
            cs["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "startedAt": started,
                    "finishedAt": timestamp(now),
                }
            }
            cs["ready"] = False
        status["conditions"] = _set_condition(
            status.get("conditions") or [], _condition("Ready", "False", "PodCompleted", "", now)
        )
        if reason == "NodeLost":
            status["reason"] = "NodeLost"
            status["message"] = "the node the pod ran on was deleted"
        self._update(PODS, {**pod, "status": status}, status=True)

    def _node(self, name: str) -> None:
        if self.store.find(NODES, "", name) is not None:
            return
        now = self.clock.now()
        for pod in self.store.objects(PODS):
            if (pod.get("spec") or {}).get("nodeName") == name and (pod.get("status") or {}).get(
                "phase"
            ) not in TERMINAL:
                self._terminate(pod, 137, "NodeLost", now)


def _seconds(text: object, default: float) -> float:
    """A run time as `90`, `0.5s` or `1h30m`; anything unreadable runs for the default."""
    if text is None:
        return default
    value = str(text).strip()
    try:
        return float(value[:-1] if value.endswith("s") else value)
    except ValueError:
        pass
    try:
        return parse_duration(value).total_seconds()
    except DurationError:
        return default


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expression_ok(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    value = labels.get(key or "")
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
    return False


def _unfit(pod: Obj, node: Obj, wanted: dict[str, float], free: dict[str, float]) -> str | None:
    """Why `pod` cannot go on `node` (the scheduler's reason text), or None if it fits."""
    spec = pod.get("spec") or {}
    labels = _meta(node).get("labels") or {}
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable"):
        return "node(s) were unschedulable"
    ready = next(
        (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    if ready is not None and ready.get("status") != "True":
        return "node(s) were not ready"
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return "node(s) didn't match Pod's node affinity/selector"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(
        all(_expression_ok(e, labels) for e in t.get("matchExpressions") or []) for t in terms
    ):
        return "node(s) didn't match Pod's node affinity/selector"
    tolerations = spec.get("tolerations") or []
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(
            taint, tolerations
        ):
            key, value = taint.get("key"), taint.get("value", "")
            return f"node(s) had untolerated taint {{{key}: {value}}}"
    for name, amount in sorted(wanted.items()):
        if amount > 0 and free.get(name, 0.0) + 1e-9 < amount:
            return f"Insufficient {name}"
    return None
