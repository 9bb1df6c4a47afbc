"""The sandbox's TTL-after-finished controllers: a finished Job with `ttlSecondsAfterFinished`
(Kubernetes' ttlafterfinished controller) and a finished PyTorchJob with
`runPolicy.ttlSecondsAfterFinished` (the training operator's cleanupJob) are deleted that long
after they finished. The workload controllers (workloads.py) hand them finished objects; the
control plane's loop (controllers.py) collects what is due."""

from __future__ import annotations

from datetime import timedelta

from burst.sandbox.base import JOBS, PYTORCHJOBS, ControllerBase, _meta, parse_stamp
from burst.sandbox.store import Obj


class TtlAfterFinished(ControllerBase):
    def _expire_after_finish(self, job: Obj) -> None:
        """The TTL-after-finished controller (pkg/controller/ttlafterfinished): a finished Job
        with `ttlSecondsAfterFinished` is deleted, with foreground propagation, that long after
        it finished (its Complete or Failed condition's transition)."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished = [
            c.get("lastTransitionTime")
            for c in (job.get("status") or {}).get("conditions") or []
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        ]
        at = parse_stamp(finished[0]) if finished and finished[0] else self.clock.now()
        meta = _meta(job)
        self._expiring[(JOBS.kind, meta["namespace"], meta["name"])] = at + timedelta(
            seconds=int(ttl)
        )

    def _expire_pytorchjob(self, job: Obj) -> None:
        """The training operator's cleanupJob (pkg/controller.v1/common/job.go): a finished
        PyTorchJob with `runPolicy.ttlSecondsAfterFinished` is deleted that long after its
        `completionTime`, with the client's default (background) propagation, so the garbage
        collector takes its pods after it."""
        ttl = ((job.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        done = (job.get("status") or {}).get("completionTime")
        at = parse_stamp(done) if done else self.clock.now()
        meta = _meta(job)
        key = (PYTORCHJOBS.kind, meta["namespace"], meta["name"])
        self._expiring[key] = at + timedelta(seconds=int(ttl))

    def _collect_expired(self) -> None:
        now = self.clock.now()
        due = sorted(key for key, at in self._expiring.items() if at <= now)
        for kind, namespace, name in due:
            del self._expiring[(kind, namespace, name)]
            res = PYTORCHJOBS if kind == PYTORCHJOBS.kind else JOBS
            job = self.store.find(res, namespace, name)
            if job is not None and not _meta(job).get("deletionTimestamp"):
                self._delete(res, job, "Foreground" if res is JOBS else "Background")
