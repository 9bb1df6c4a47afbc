"""The sandbox's kubelet: it runs a bound pod for its `sandbox.burst.dev/duration` annotation on the
Clock, then ends it Succeeded or Failed by `sandbox.burst.dev/exit-code`, or restarts its containers
in place as the pod's restartPolicy says (CrashLoopBackOff between); and pod GC's mark on the pods
of a node that is gone. controllers.py runs it in every round of the control plane."""

from __future__ import annotations

import copy
import heapq
from datetime import datetime, timedelta
from typing import Any

from burst.durations import DurationError, parse_duration
from burst.sandbox.base import (
    DURATION,
    EXIT_CODE,
    NODES,
    PODS,
    ControllerBase,
    _condition,
    _meta,
    _set_condition,
)
from burst.sandbox.store import Obj, timestamp

# The kubelet's wait before it restarts a crashed container: its first and its most
# (pkg/kubelet/kubelet.go backOffPeriod, MaxContainerBackOff).
CRASH_BACKOFF = (10.0, 300.0)


class Kubelet(ControllerBase):
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
            self._due(pod, now + timedelta(seconds=seconds))

    def _due(self, pod: Obj, at: datetime) -> None:
        """Look at the pod again at `at`: its run over, or its back-off."""
        meta = _meta(pod)
        heapq.heappush(self._running, (at, meta["namespace"], meta["name"], meta["uid"]))

    def _kubelet_finish(self) -> None:
        now = self.clock.now()
        while self._running and self._running[0][0] <= now:
            _, namespace, name, uid = heapq.heappop(self._running)
            pod = self.store.find(PODS, namespace, name)
            if pod is None or _meta(pod)["uid"] != uid:
                self._crash_loops.pop(uid, None)  # gone: so is its back-off
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            if any("waiting" in (cs.get("state") or {}) for cs in _containers(pod)):
                self._restart(pod, now)  # its back-off is over
                continue
            code = int((_meta(pod).get("annotations") or {}).get(EXIT_CODE, 0))
            policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                self._crashed(pod, code, now)
            else:
                self._terminate(pod, code, now)

    def _crashed(self, pod: Obj, code: int, now: datetime) -> None:
        """The kubelet restarts a container that ended under restartPolicy Always, or in error
        under OnFailure, in place: at once the first time, and after that once its back-off is
        over, 10 s doubling to 5 minutes, forgotten after 10 minutes without a crash
        (pkg/kubelet/kuberuntime/kuberuntime_manager.go doBackOff; client-go flowcontrol.Backoff
        IsInBackOffSince and Next; kubelet.go backOffPeriod, MaxContainerBackOff). Meanwhile the
        pod stays Running, its container waiting in CrashLoopBackOff and the pod not Ready."""
        first, most = CRASH_BACKOFF
        uid = _meta(pod)["uid"]
        backoff, last = self._crash_loops.get(uid, (0.0, None))
        fresh = last is None or (now - last).total_seconds() > 2 * most
        wait = 0.0 if fresh else backoff
        self._crash_loops[uid] = (first if fresh else min(backoff * 2, most), now)
        if not wait:
            self._restart(pod, now, code)
            return
        status = copy.deepcopy(pod.get("status") or {})
        for cs in status.get("containerStatuses") or []:
            cs["lastState"] = _ended(cs, code, now)
            cs["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {wait:g}s restarting failed container={cs.get('name')} "
                    f"pod={_meta(pod)['name']}_{_meta(pod).get('namespace')}({uid})",
                }
            }
            cs["ready"] = False
        status["conditions"] = _set_condition(
            status.get("conditions") or [],
            _condition(
                "Ready", "False", "ContainersNotReady", "containers with unready status", now
            ),
        )
        if self._update(PODS, {**pod, "status": status}, status=True) is not None:
            self._due(pod, now + timedelta(seconds=wait))

    def _restart(self, pod: Obj, now: datetime, code: int | None = None) -> None:
        """The kubelet starts the pod's containers again (`code`: how the last run ended, when
        it is restarted as it ends), and they run their duration again."""
        status = copy.deepcopy(pod.get("status") or {})
        for cs in status.get("containerStatuses") or []:
            if code is not None:
                cs["lastState"] = _ended(cs, code, now)
            cs["state"] = {"running": {"startedAt": timestamp(now)}}
            cs["restartCount"] = int(cs.get("restartCount") or 0) + 1
            cs["ready"] = True
        status["conditions"] = _set_condition(
            status.get("conditions") or [], _condition("Ready", "True", "", "", now)
        )
        annotations = _meta(pod).get("annotations") or {}
        seconds = _seconds(annotations.get(DURATION), self.default_duration)
        if self._update(PODS, {**pod, "status": status}, status=True) is not None:
            self._due(pod, now + timedelta(seconds=seconds))

    def _terminate(self, pod: Obj, code: int, now: datetime) -> None:
        """The kubelet ends a pod whose run is over, its containers with `code`."""
        self._crash_loops.pop(_meta(pod)["uid"], None)
        status = copy.deepcopy(pod.get("status") or {})
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        for cs in status.get("containerStatuses") or []:
            cs["state"] = _ended(cs, code, now)
            cs["ready"] = False
        status["conditions"] = _set_condition(
            status.get("conditions") or [], _condition("Ready", "False", "PodCompleted", "", now)
        )
        self._update(PODS, {**pod, "status": status}, status=True)

    def _orphaned(self, pod: Obj, now: datetime) -> None:
        """Pod GC fails a pod whose node is gone (pkg/controller/podgc/gc_controller.go gcOrphaned,
        markFailedAndDeletePodWithCondition): the status as its kubelet last wrote it, the phase
        Failed and a DisruptionTarget condition, which a pod failure policy can tell from the
        job's own failures. Its containers keep their last state: no kubelet is left to say how
        they ended, so they have no exit code."""
        status = copy.deepcopy(pod.get("status") or {})
        status["phase"] = "Failed"
        status["conditions"] = _set_condition(
            status.get("conditions") or [],
            _condition(
                "DisruptionTarget", "True", "DeletionByPodGC", "PodGC: node no longer exists", now
            ),
        )
        self._update(PODS, {**pod, "status": status}, status=True)


def _containers(pod: Obj) -> list[dict[str, Any]]:
    return list((pod.get("status") or {}).get("containerStatuses") or [])


def _ended(cs: dict[str, Any], code: int, now: datetime) -> dict[str, Any]:
    """A container's run that ended with `code`, as its lastState."""
    started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", timestamp(now))
    reason = "Completed" if code == 0 else "Error"
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": timestamp(now),
        }
    }


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
