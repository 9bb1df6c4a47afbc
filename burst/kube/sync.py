"""Mirror a remote copy's progress back to the user's workload, and clean up after it.

`status_update(local, remote, placement, cost)` is pure: what the local object should show
(annotations `burst.dev/placement`, `burst.dev/cost`), the Event a user sees in `kubectl describe`,
and whether the workload has finished remotely. `Syncer.sync()` applies it; the remote copy is
deleted (background propagation) only after the final status is recorded locally. Remote objects
with our origin label whose local workload is gone are collected; a remote cluster that stops
answering is tracked, and after a grace period its workloads are requeued on-prem.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from burst import failpoints
from burst.amounts import Money
from burst.clock import Clock
from burst.kube.copies import CopyKey
from burst.kube.events import EventRecorder
from burst.kube.replicate import KubeObjects, suspend_patch
from burst.kube.translate import ORIGIN_INSTALLATION

Phase = Literal["missing", "pending", "running", "succeeded", "failed"]


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _recorded_outcome(
    local: Mapping[str, Any], prefix: str
) -> Literal["succeeded", "failed"] | None:
    """The outcome burst mirrored onto the local workload when its remote copy finished, if any:
    the workload is finished, and burst said before that its copy had finished so."""
    said = (_meta(local).get("annotations") or {}).get(f"{prefix}remote-phase")
    done = remote_phase(local)
    if done == "succeeded" and said == done:
        return "succeeded"
    if done == "failed" and said == done:
        return "failed"
    return None


def _condition(type_: str, reason: str, message: str, stamp: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


def mirrored_status(
    local: Mapping[str, Any],
    remote_status: Mapping[str, Any],
    phase: Literal["succeeded", "failed"],
    placement: str,
    stamp: str,
) -> dict[str, Any]:
    """The status the local workload takes when its copy finished: the remote status whole, as
    Kueue's MultiKueue adapters copy it, made what the local API server accepts. For a Job that is
    the 1.32+ rules (JobManagedBy on by default; pkg/apis/batch/validation ValidateJobStatusUpdate):
    Complete only with SuccessCriteriaMet, Failed only with FailureTarget, completionTime only when
    Complete, a startTime on every finished Job, no active or terminating pods, counters that never
    go down. A remote cluster older than 1.31 sets none of the companion conditions."""
    status = copy.deepcopy(dict(remote_status))
    if local.get("kind") != "Job":
        return status  # a training operator's status is not validated: copied as it is
    before = local.get("status") or {}
    message = f"finished on {placement}"
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Suspended"]
    wanted = (
        ("SuccessCriteriaMet", "Complete") if phase == "succeeded" else ("FailureTarget", "Failed")
    )
    for type_ in wanted:
        if not any(c.get("type") == type_ and c.get("status") == "True" for c in conditions):
            conditions.append(_condition(type_, "BurstRemote", message, stamp))
    status["conditions"] = conditions
    status["startTime"] = status.get("startTime") or before.get("startTime") or stamp
    if phase == "succeeded":
        status["completionTime"] = max(status.get("completionTime") or stamp, status["startTime"])
    else:
        status.pop("completionTime", None)
    for key in ("active", "ready", "terminating"):
        status[key] = 0
    status.pop("uncountedTerminatedPods", None)
    for counter in ("succeeded", "failed"):
        status[counter] = max(int(status.get(counter) or 0), int(before.get(counter) or 0))
    return status


def remote_phase(remote: Mapping[str, Any] | None) -> Phase:
    if remote is None:
        return "missing"
    status = remote.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Complete") == "True" or conditions.get("Succeeded") == "True":
        return "succeeded"
    if conditions.get("Failed") == "True":
        return "failed"
    if conditions.get("Running") == "True":
        return "running"
    # A Job's active pods may all be Pending (unschedulable): ready ones run. A server older
    # than status.ready (1.24) only says active, taken for running.
    if "ready" in status:
        return "running" if status.get("ready") else "pending"
    return "running" if status.get("active") else "pending"


@dataclass(frozen=True)
class StatusUpdate:
    annotations: dict[str, str]
    event: tuple[Literal["Normal", "Warning"], str, str] | None
    finished: Literal["succeeded", "failed"] | None = None
    local_status: dict[str, Any] = field(default_factory=dict)
    failed_pods: int = 0  # failed pods a Job copy counts (see below)
    restarts_in_place: bool = False  # and whether its failing containers restart in place


def failed_pods(remote: Mapping[str, Any] | None) -> int:
    """How many failed pods a Job copy has counted: `status.failed`, and those listed in
    `uncountedTerminatedPods.failed` (the controller lists a failed pod there first, with no pod
    ready, and adds it to `failed` on a later write: trackJobStatusAndRemoveFinalizers). With
    IGNORE_DISRUPTION first in its pod failure policy a lost node's pod is not counted
    (nonIgnoredFailedPodsCount), so each one counted exited in error; under restartPolicy
    OnFailure, which allows no such rule, a container that exits in error restarts in place and
    only a pod taken away is counted. 0 for another kind."""
    job = remote or {}
    if job.get("kind") != "Job":
        return 0
    status = job.get("status") or {}
    listed = (status.get("uncountedTerminatedPods") or {}).get("failed") or []
    return int(status.get("failed") or 0) + len(listed)


def restarts_in_place(remote: Mapping[str, Any] | None) -> bool:
    """Whether a Job copy's failing container restarts in place (restartPolicy OnFailure): its
    pod Running but not ready in its CrashLoopBackOff, as after a reclaim, with no pod counted
    failed."""
    job = remote or {}
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return job.get("kind") == "Job" and template.get("restartPolicy") == "OnFailure"


def status_update(
    local: Mapping[str, Any],
    remote: Mapping[str, Any] | None,
    placement: str,
    cost: Money | None,
    now: datetime,
    prefix: str = "burst.dev/",
) -> StatusUpdate:
    """What the local workload should show about its remote copy (pure)."""
    recorded = _recorded_outcome(local, prefix) if remote is None else None
    phase = recorded or remote_phase(remote)
    annotations = {f"{prefix}placement": placement, f"{prefix}remote-phase": phase}
    if cost is not None:
        annotations[f"{prefix}cost"] = str(cost)
    if recorded is not None:
        # The outcome was recorded here and the remote copy deleted, but the database never heard
        # (a crash, or a replaced leader, in between): finish from what the workload shows.
        return StatusUpdate(annotations, None, recorded)
    current = _meta(local).get("annotations") or {}
    changed = current.get(f"{prefix}remote-phase") != phase
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    if phase in ("succeeded", "failed"):
        finished: Literal["succeeded", "failed"] = "succeeded" if phase == "succeeded" else "failed"
        remote_status = (remote or {}).get("status") or {}
        local_status = mirrored_status(local, remote_status, finished, placement, stamp)
        kind: Literal["Normal", "Warning"] = "Normal" if phase == "succeeded" else "Warning"
        event = (
            kind,
            "BurstFinished",
            f"{phase} on {placement}" + (f", cost {cost}" if cost else ""),
        )
        return StatusUpdate(annotations, event, finished, local_status)
    progress: tuple[Literal["Normal", "Warning"], str, str] | None = None
    if changed and phase != "missing":
        progress = ("Normal", "BurstProgress", f"{phase} on {placement}")
    return StatusUpdate(
        annotations,
        progress,
        failed_pods=failed_pods(remote),
        restarts_in_place=restarts_in_place(remote),
    )


class RemoteHealth:
    """When each remote cluster last answered; past `grace` without an answer it is lost."""

    def __init__(self, clock: Clock, grace: timedelta = timedelta(minutes=10)) -> None:
        self._clock, self._grace = clock, grace
        self._failing_since: dict[str, datetime] = {}
        self.asked: set[str] = set()  # the clusters heard from or not since the owner cleared it

    def ok(self, target: str) -> None:
        self._failing_since.pop(target, None)
        self.asked.add(target)

    def failed(self, target: str) -> None:
        self._failing_since.setdefault(target, self._clock.now())
        self.asked.add(target)

    def failing(self, target: str) -> bool:
        """Whether its last call went unanswered (lost or not yet)."""
        return target in self._failing_since

    def lost(self, target: str) -> bool:
        since = self._failing_since.get(target)
        return since is not None and self._clock.now() - since >= self._grace


class Syncer:
    def __init__(
        self,
        local: KubeObjects,
        events: EventRecorder,
        clock: Clock,
        installation: str,
        prefix: str = "burst.dev/",
    ) -> None:
        self.local, self.events, self.clock = local, events, clock
        self.installation, self.prefix = installation, prefix

    def sync(
        self,
        local: Mapping[str, Any],
        remote: KubeObjects,
        remote_namespace: str,
        remote_name: str,
        placement: str,
        cost: Money | None = None,
        *,
        listed: Mapping[CopyKey, Mapping[str, Any]] | None = None,
    ) -> StatusUpdate:
        """Mirror the copy onto the local object. `listed`: this pass's copies, listed or
        mirrored (one list per cluster instead of a read per copy); a copy they lack, or all
        copies without them, is read, so that a copy is never called missing on a list or a
        mirror that has not caught up with its creation."""
        meta = _meta(local)
        found = (listed or {}).get((local["kind"], remote_namespace, remote_name))
        if found is None:
            found = remote.read(local["kind"], remote_namespace, remote_name)
        update = status_update(local, found, placement, cost, self.clock.now(), self.prefix)
        current = meta.get("annotations") or {}
        if any(current.get(k) != v for k, v in update.annotations.items()):
            self.local.patch(
                local["kind"],
                meta["namespace"],
                meta["name"],
                {"metadata": {"annotations": update.annotations}},
            )
        if update.event is not None:
            self.events.record(local, *update.event)
        if update.local_status:
            # Record the outcome here first; only then may the remote copy go.
            self.local.patch(
                local["kind"],
                meta["namespace"],
                meta["name"],
                {"status": update.local_status},
                status=True,
            )
            failpoints.hit("outcome-recorded")
            remote.delete(local["kind"], remote_namespace, remote_name)
        return update

    def requeue(self, local: Mapping[str, Any], why: str) -> None:
        """The copy is lost (its cluster or pool gone, itself vanished or stuck): let the
        workload run on-prem again, and say why on it."""
        meta = _meta(local)
        self.local.patch(
            local["kind"], meta["namespace"], meta["name"], suspend_patch(local["kind"], False)
        )
        self.local.patch(
            local["kind"],
            meta["namespace"],
            meta["name"],
            {
                "metadata": {
                    "annotations": {
                        f"{self.prefix}placement": None,
                        f"{self.prefix}remote-phase": None,
                    }
                }
            },
        )
        self.events.record(
            local, "Warning", "BurstRequeued", f"{why}; the job is back in the on-prem queue"
        )

    def copies(
        self, remote: KubeObjects, kinds: Iterable[str] = ("Job", "PyTorchJob")
    ) -> dict[CopyKey, dict[str, Any]]:
        """Every copy this installation made in a remote cluster, by (kind, namespace, name):
        one list per kind, selected by the installation's label."""
        selector = f"{ORIGIN_INSTALLATION}={self.installation}"
        out: dict[CopyKey, dict[str, Any]] = {}
        for kind in sorted(set(kinds)):
            if kind == "Job":
                response = remote.batch.list_job_for_all_namespaces(
                    label_selector=selector, _preload_content=False
                )
            else:
                response = remote.custom.list_cluster_custom_object(
                    "kubeflow.org", "v1", "pytorchjobs", label_selector=selector,
                    _preload_content=False,
                )  # fmt: skip
            for obj in json.loads(response.data)["items"]:
                # Items of a list need not carry their kind: it is known from the list.
                obj = {**obj, "kind": kind}
                out[(kind, _meta(obj)["namespace"], _meta(obj)["name"])] = obj
        return out

    def collect_stale(self, remote: KubeObjects, active: set[tuple[str, str]]) -> list[str]:
        """Delete what this installation made in a remote cluster that no active dispatch backs:
        copies whose workload is gone, finished or requeued, and the Secrets and ConfigMaps burst
        copied into namespaces where no active copy is left. `active`: (namespace, name) of the
        copies of planned and dispatched workloads."""
        selector = f"{ORIGIN_INSTALLATION}={self.installation}"
        gone = []
        for kind, namespace, name in sorted(self.copies(remote)):
            if (namespace, name) not in active:
                remote.delete(kind, namespace, name)
                gone.append(f"{namespace}/{name}")
        in_use = {namespace for namespace, _ in active}
        for kind, items in (
            ("Secret", remote.core.list_secret_for_all_namespaces),
            ("ConfigMap", remote.core.list_config_map_for_all_namespaces),
        ):
            listed = json.loads(items(label_selector=selector, _preload_content=False).data)
            for obj in listed["items"]:
                namespace, name = _meta(obj)["namespace"], _meta(obj)["name"]
                if namespace not in in_use:
                    remote.delete(kind, namespace, name)
                    gone.append(f"{kind} {namespace}/{name}")
        return gone
