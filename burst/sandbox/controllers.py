"""The sandbox's simulated control plane: small loops over the same store as the API server.
This module holds the scheduler and runs every controller's round (`step`); base.py the shared
parts and the garbage collector, workloads.py the Job and PyTorchJob controllers, kubelet.py the
kubelet.

- Job controller: pods from the template up to parallelism/completions, backoffLimit, the wait
  before a failed pod is replaced, `suspend`, and it leaves alone a Job whose `spec.managedBy`
  names another controller.
- PyTorchJob controller: master and worker pods, `runPolicy.suspend`, Kubeflow-style conditions.
- Scheduler: binds pending pods to nodes with free `nvidia.com/gpu`, CPU and memory, honouring node
  selectors, required node affinity, taints and tolerations; marks the others
  `PodScheduled=False, reason=Unschedulable` with the real scheduler's kind of message.
- Kubelet: runs a bound pod for its `sandbox.burst.dev/duration` on the Clock, then Succeeded or
  Failed by `sandbox.burst.dev/exit-code`, or restarts its containers in place as its
  restartPolicy says; a deleted node fails its pods (a spot interruption).
- Garbage collector: dependents of deleted owners (background), foreground deletion.

Every loop reacts to store changes (the store calls `notify`) and to the clock (one tick every
`tick` seconds). Each reconcile is idempotent, as real controllers are.
"""

from __future__ import annotations

import logging
from typing import Any

from burst.kube.quantity import quantity
from burst.sandbox.base import (
    NODES,
    PODS,
    TERMINAL,
    _condition,
    _meta,
    _set_condition,
    pod_requests,
)
from burst.sandbox.errors import ApiError
from burst.sandbox.kubelet import Kubelet
from burst.sandbox.resources import BY_KIND
from burst.sandbox.store import Obj
from burst.sandbox.workloads import WorkloadControllers

log = logging.getLogger(__name__)


class ControlPlane(WorkloadControllers, Kubelet):
    def step(self) -> None:
        """One round of every controller over what changed, and of the kubelet over the clock."""
        now = self.clock.now()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            reschedule, self._reschedule = self._reschedule, False
            # Left in place until the Job's round takes it (a round cut short by a conflict
            # drops what it had not reached, and a Job backing off has nothing else to wake it).
            dirty.update(("Job", *key) for key, at in self._backing_off.items() if at <= now)
        deleted_uids = {ns for kind, ns, _ in dirty if kind == "deleted-owner"}
        for kind, namespace, name in sorted(dirty):
            if kind == "Job":
                self._job(namespace, name)
            elif kind == "PyTorchJob":
                self._pytorchjob(namespace, name)
            elif kind == "Node":
                self._node(name)
            elif kind == "Namespace":
                self._namespace(name)
        self._collect_garbage(deleted_uids)
        self._collect_expired()
        if self.store.kueue is not None and any(kind == "Job" for kind, _, _ in dirty):
            for job, suspend in self.store.kueue.decide(self.store.objects(BY_KIND["Job"])):
                meta = _meta(job)
                self.store.patch(
                    BY_KIND["Job"],
                    meta["namespace"],
                    meta["name"],
                    "application/merge-patch+json",
                    {"spec": {"suspend": suspend}},
                    manager="kueue-controller-manager",
                )
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
            # Only a node with the room can take the pod: the others' reasons are counted only
            # when no node takes it (the message names them all).
            chosen = next(
                (
                    node
                    for node in nodes
                    if _room(wanted, free.get(_meta(node)["name"], {}))
                    and _unfit(pod, node, wanted, free.get(_meta(node)["name"], {})) is None
                ),
                None,
            )
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
            reasons: dict[str, int] = {}
            for node in nodes:
                why = _unfit(pod, node, wanted, free.get(_meta(node)["name"], {}))
                if why is not None:
                    reasons[why] = reasons.get(why, 0) + 1
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

    # -- namespaces and nodes --

    def _namespace(self, name: str) -> None:
        """The namespace controller (pkg/controller/namespace): a terminating namespace's content
        is deleted; once none is left, the namespace goes. Content held by finalizers nobody
        removes keeps it Terminating."""
        namespace = self.store.find(BY_KIND["Namespace"], "", name)
        if namespace is None or not _meta(namespace).get("deletionTimestamp"):
            return
        content = self.store.content_of(name)
        for res, obj in content:
            if not _meta(obj).get("deletionTimestamp"):
                self._delete(res, obj, "Background")
        if not content:
            self.store.finalize_namespace(name)
        else:
            with self._lock:  # look again when what is left has gone
                self._dirty.add(("Namespace", "", name))

    def _node(self, name: str) -> None:
        if self.store.find(NODES, "", name) is not None:
            return
        now = self.clock.now()
        for pod in self.store.objects(PODS):
            if (pod.get("spec") or {}).get("nodeName") == name and (pod.get("status") or {}).get(
                "phase"
            ) not in TERMINAL:
                self._orphaned(pod, now)


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


def _room(wanted: dict[str, float], free: dict[str, float]) -> bool:
    return all(
        amount <= 0 or free.get(name, 0.0) + 1e-9 >= amount for name, amount in wanted.items()
    )


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
        if not _room({name: amount}, free):
            return f"Insufficient {name}"
    return None
