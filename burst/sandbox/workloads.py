"""The sandbox's workload controllers: Jobs (pods from the template up to parallelism/completions,
backoffLimit and the pod failure backoff, the pod failure policy's Ignore, Count and FailJob,
`suspend`, leaving alone a Job whose `spec.managedBy` names another controller) and Kubeflow
PyTorchJobs (master and worker pods, `runPolicy.suspend`, Kubeflow-style conditions, a failed pod
made again or the job failed as its replica's restartPolicy says)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from burst.sandbox.base import (
    JOB_CONTROLLER,
    JOBS,
    PODS,
    PYTORCHJOBS,
    TERMINAL,
    _condition,
    _meta,
    _set_condition,
    parse_stamp,
)
from burst.sandbox.errors import ApiError
from burst.sandbox.store import Obj, timestamp
from burst.sandbox.ttl import TtlAfterFinished


class WorkloadControllers(TtlAfterFinished):
    # -- Job --

    def _job(self, namespace: str, name: str) -> None:
        with self._lock:
            self._backing_off.pop((namespace, name), None)  # looked at now: set again if still due
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
            self._expire_after_finish(job)
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
        rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
        actions = [
            failure_action(rules, p)
            for p in pods
            if (p.get("status") or {}).get("phase") == "Failed"
        ]
        failed = sum(1 for a in actions if a != "Ignore")
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
            # Resuming starts the clock again, activeDeadlineSeconds with it (pkg/controller/job/
            # job_controller.go syncJob; Kubernetes docs, "Suspending a Job").
            status["startTime"] = timestamp(now)
        status.setdefault("startTime", timestamp(now))
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        done = (
            succeeded >= completions if completions is not None else (succeeded > 0 and not active)
        )
        over = failed > int(spec.get("backoffLimit", 6)) or _past_limit_on_failure(spec, active)
        if "FailJob" in actions or over:
            for pod in active:
                self._delete(PODS, pod, "Background")
            reason, message = (
                ("PodFailurePolicy", "Pod failed matching a FailJob rule of the pod failure policy")
                if "FailJob" in actions
                else ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            )
            # FailureTarget first, then Failed: a Failed condition without FailureTarget is
            # refused on 1.32+ (pkg/apis/batch/validation/validation.go, JobManagedBy rules).
            for type_ in ("FailureTarget", "Failed"):
                conditions = _set_condition(
                    conditions, _condition(type_, "True", reason, message, now)
                )
            self._event(job, "Warning", reason, message)
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
        elif (wait := failure_backoff(pods, now, *self.pod_failure_backoff)) > 0:
            with self._lock:  # no pod until it is over (job_controller.go manageJob)
                self._backing_off[(namespace, name)] = now + timedelta(seconds=wait)
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
            ready=sum(1 for p in active if _ready(p)),
        )
        if conditions:
            status["conditions"] = conditions
        self._write_status(JOBS, job, status)

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
            self._expire_pytorchjob(job)
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
        failed_for_good, restarting = False, []
        for rtype, rspec in sorted(replicas.items()):
            counts = {"active": 0, "succeeded": 0, "failed": 0}
            policy = (rspec or {}).get("restartPolicy") or "OnFailure"  # the operator's default
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
                    # setRestartPolicy (common/pod.go): the replica's, ExitCode as Never.
                    template = copy.deepcopy((rspec or {}).get("template") or {})
                    template.setdefault("spec", {})["restartPolicy"] = (
                        "Never" if policy == "ExitCode" else policy
                    )
                    pod = self._create_pod(job, template, "", labels, pod_name)
                phase = (pod.get("status") or {}).get("phase")
                key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase or "", "active")
                counts[key] += 1
                if phase != "Failed":
                    continue
                if _restarted(policy, pod, spec.get("runPolicy") or {}):
                    self._delete(PODS, pod, "Background")  # made again at its index next time
                    restarting.append(rtype)
                else:
                    failed_for_good = True
            replica_statuses[rtype] = counts
        status["replicaStatuses"] = replica_statuses
        status.setdefault("startTime", timestamp(now))
        failed_for_good = failed_for_good or _past_backoff_limit(spec, pods)
        master = replica_statuses.get("Master")
        if failed_for_good:
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
        elif restarting:
            # Restarting and Running replace each other (pkg/util/status.go filterOutCondition).
            conditions = _set_condition(
                [c for c in conditions if c.get("type") != "Running"],
                _condition(
                    "Restarting",
                    "True",
                    "PyTorchJobRestarting",
                    f"job {name} is restarting because {restarting[0]} replica(s) failed.",
                    now,
                ),
            )
        elif any(p.get("status", {}).get("phase") == "Running" for p in pods):
            conditions = _set_condition(
                [c for c in conditions if c.get("type") != "Restarting"],
                _condition(
                    "Running", "True", "PyTorchJobRunning", f"PyTorchJob {name} is running.", now
                ),
            )
        status["conditions"] = conditions
        self._write_status(PYTORCHJOBS, job, status)


def _ready(pod: Obj) -> bool:
    """Whether the pod is Ready (what a Job's status.ready counts: podutil.IsPodReady)."""
    return any(
        (c.get("type"), c.get("status")) == ("Ready", "True")
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _past_limit_on_failure(spec: Mapping[str, Any], active: Sequence[Obj]) -> bool:
    """Under restartPolicy OnFailure a failing container restarts in place and no pod fails: the
    Job fails once its running and pending pods' restarts reach backoffLimit
    (pkg/controller/job/job_controller.go pastBackoffLimitOnFailure)."""
    if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") != "OnFailure":
        return False
    return _restarts_reach(active, int(spec.get("backoffLimit", 6)))


def _past_backoff_limit(spec: Mapping[str, Any], pods: Sequence[Obj]) -> bool:
    """The training operator's PastBackoffLimit (v1.9.0 common/job.go): with runPolicy.backoffLimit
    set, the restarts in place of the running pods of OnFailure, Always and ExitCode replicas
    reach it."""
    limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    if limit is None:
        return False
    counted = {
        rtype.lower()
        for rtype, rspec in (spec.get("pytorchReplicaSpecs") or {}).items()
        if ((rspec or {}).get("restartPolicy") or "OnFailure") != "Never"
    }
    running = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and (_meta(p).get("labels") or {}).get("training.kubeflow.org/replica-type") in counted
    ]
    return _restarts_reach(running, int(limit))


def _restarts_reach(pods: Sequence[Obj], limit: int) -> bool:
    """Whether the pods' containers have restarted `limit` times, or at all for a limit of 0
    (both controllers read a backoffLimit of restarts so)."""
    restarts = sum(
        int(cs.get("restartCount") or 0)
        for p in pods
        for cs in (p.get("status") or {}).get("containerStatuses") or []
    )
    return restarts > 0 if limit == 0 else restarts >= limit


def failure_backoff(pods: Sequence[Obj], now: datetime, first: float, most: float) -> float:
    """How many seconds the Job controller waits yet before it replaces a failed pod
    (pkg/controller/job/backoff_utils.go newBackoffRecord, getRemainingTimeForFailuresCount):
    with n pods failed since the last success, `first` x 2^(n-1), at most `most`, from when the
    last of them finished. Failures the pod failure policy ignores count here too. The real
    controller keeps the count as it finalizes pods; the sandbox keeps the pods and counts them."""
    ends: dict[str, list[datetime]] = {"Succeeded": [], "Failed": []}
    for p in pods:
        phase = (p.get("status") or {}).get("phase")
        if phase in ends:
            ends[phase].append(finished_at(p))
    since = max(ends["Succeeded"], default=None)
    failed = [end for end in ends["Failed"] if since is None or end > since]
    if not failed:
        return 0.0
    wait = min(first * 2.0 ** min(len(failed) - 1, 32), most)  # no float overflow past the cap
    return max(0.0, wait - (now - max(failed)).total_seconds())


# The condition pod GC marks a lost node's pod with (kubelet.py _orphaned)
GC_MARK = ("DisruptionTarget", "True", "DeletionByPodGC")


def finished_at(pod: Obj) -> datetime:
    """When a pod ended, as the Job controller reads it (backoff_utils.go getFinishedTime): the
    last of its containers' finishedAt when all have one, else when it turned Ready=False, else
    when it was deleted; one pod GC failed is deleted as it is marked, which the sandbox does not
    do, so its DisruptionTarget's time stands in. Else its creation."""
    status = pod.get("status") or {}
    ends = [
        str(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt") or "")
        for cs in status.get("containerStatuses") or []
    ]
    if ends and all(ends):
        return max(parse_stamp(end) for end in ends)
    conditions = [c for c in status.get("conditions") or [] if c.get("lastTransitionTime")]
    unready = [c for c in conditions if (c.get("type"), c.get("status")) == ("Ready", "False")]
    marked = [c for c in conditions if (c.get("type"), c.get("status"), c.get("reason")) == GC_MARK]
    if unready or marked:
        return parse_stamp(str((unready or marked)[0]["lastTransitionTime"]))
    meta = _meta(pod)
    return parse_stamp(str(meta.get("deletionTimestamp") or meta["creationTimestamp"]))


def failure_action(rules: list[dict[str, Any]], pod: dict[str, Any]) -> str:
    """What a Job's pod failure policy does with a failed pod: the first rule that matches it
    (pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy: onExitCodes against each
    container's exit code, 0 never matching; onPodConditions against the pod's conditions,
    status True unless the pattern says); `Count` when none does."""
    status = pod.get("status") or {}
    codes = [
        (cs.get("name"), ((cs.get("state") or {}).get("terminated") or {}).get("exitCode"))
        for cs in status.get("containerStatuses") or []
    ]
    conditions = {(c.get("type"), c.get("status")) for c in status.get("conditions") or []}
    for rule in rules:
        exits = rule.get("onExitCodes")
        if exits:
            wanted = set(exits.get("values") or [])
            for name, code in codes:
                if code in (None, 0) or exits.get("containerName") not in (None, name):
                    continue
                if (code in wanted) == (exits.get("operator") == "In"):
                    return str(rule.get("action"))
        for pattern in rule.get("onPodConditions") or []:
            if (pattern.get("type"), pattern.get("status", "True")) in conditions:
                return str(rule.get("action"))
    return "Count"


UNKNOWN_EXIT = 0xBEEF  # the operator's stand-in when its container left no exit code


def _restarted(policy: str, pod: Mapping[str, Any], run_policy: Mapping[str, Any]) -> bool:
    """Whether the training operator deletes a failed replica pod to make it again rather than
    fail the PyTorchJob (kubeflow/training-operator v1.9.0): OnFailure and Always always, ExitCode
    when the `pytorch` container's exit code is 128 or more, or unknown (pod GC fails a deleted
    node's pods without one), as retryable (pkg/controller.v1/common/pod.go ReconcilePods,
    pkg/util/train IsRetryableExitCode); Never fails the job (pytorchjob_controller.go
    UpdateJobStatus). A backoffLimit of 0 fails it on any failed pod: the PyTorchJob
    controller's work queue never counts a retry (pkg/controller.v1/common/job.go)."""
    if run_policy.get("backoffLimit") == 0:
        return False
    if policy in ("OnFailure", "Always"):
        return True
    if policy != "ExitCode":
        return False
    code = UNKNOWN_EXIT
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if cs.get("name") == "pytorch" and terminated is not None:
            code = int(terminated.get("exitCode", 0))
    return code >= 128
