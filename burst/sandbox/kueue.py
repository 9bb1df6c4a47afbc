"""A minimal Kueue for the sandbox, as strict as Kueue v0.19 (kubernetes-sigs/kueue) where burst
meets it, for the tests of burst's handling of Kueue-managed Jobs:

- A Job created with the `kueue.x-k8s.io/queue-name` label is suspended: the mutating webhook on
  create (pkg/controller/jobframework/defaults.go ApplyDefaultForSuspend).
- Queued Jobs are admitted in creation order while their ClusterQueue's nominal `nvidia.com/gpu`
  quota has room; admission unsuspends them, a finished Job gives its quota back
  (jobframework/reconciler.go startJob, step 7).
- A Job unsuspended without admission is suspended again (step 8, stopJob: "Not admitted by
  cluster queue").
- The label cannot change while the Job is unsuspended (pkg/controller/jobframework/validation.go
  validateUpdateForQueueName, through the validating webhook).
- A Job without the label is not Kueue's (manageJobsWithoutQueueName is false by default).

Queues here are ClusterQueues named as the label's value (the LocalQueue step is left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from burst.kube.quantity import quantity
from burst.model import KUEUE_QUEUE_LABEL
from burst.sandbox.errors import ApiError

Obj = dict[str, Any]


def _labels(obj: Obj) -> dict[str, str]:
    return ((obj.get("metadata") or {}).get("labels")) or {}


def _gpus(job: Obj) -> int:
    spec = job.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    per_pod = sum(
        int(quantity(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0)))
        for c in pod.get("containers") or []
    )
    return per_pod * int(spec.get("parallelism", 1) or 1)


def _finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


class Kueue:
    def __init__(self, quotas: Mapping[str, int]) -> None:
        self.quotas = dict(quotas)  # ClusterQueue -> nominal GPUs
        self.admitted: dict[str, tuple[str, int]] = {}  # Job uid -> (queue, GPUs)

    def on_create(self, job: Obj) -> None:
        """The mutating webhook: a queued Job starts suspended."""
        if _labels(job).get(KUEUE_QUEUE_LABEL):
            job.setdefault("spec", {})["suspend"] = True

    def check_update(self, old: Obj, new: Obj) -> None:
        """The validating webhook: the queue of a running Job is fixed."""
        before, after = _labels(old).get(KUEUE_QUEUE_LABEL), _labels(new).get(KUEUE_QUEUE_LABEL)
        if before != after and not (new.get("spec") or {}).get("suspend"):
            raise ApiError(
                403,
                "Forbidden",
                'admission webhook "vjob.kb.io" denied the request: '
                f'metadata.labels[{KUEUE_QUEUE_LABEL}]: Invalid value: "{after}": '
                "field is immutable",
            )

    def decide(self, jobs: list[Obj]) -> list[tuple[Obj, bool]]:
        """(Job, suspend) for every Job whose suspension must change: admit what fits, stop
        what runs unadmitted. Jobs in creation order."""
        changes: list[tuple[Obj, bool]] = []
        live = {str((j.get("metadata") or {}).get("uid")) for j in jobs}
        for uid in [u for u in self.admitted if u not in live]:
            del self.admitted[uid]
        used: dict[str, int] = {}
        for job in jobs:
            uid = str(job["metadata"]["uid"])
            if uid in self.admitted and (_finished(job) or not _labels(job).get(KUEUE_QUEUE_LABEL)):
                del self.admitted[uid]
            elif uid in self.admitted:
                queue, gpus = self.admitted[uid]
                used[queue] = used.get(queue, 0) + gpus
        for job in sorted(
            jobs, key=lambda j: (j["metadata"]["creationTimestamp"], j["metadata"]["name"])
        ):
            uid, label = str(job["metadata"]["uid"]), _labels(job).get(KUEUE_QUEUE_LABEL)
            if not label or _finished(job) or uid in self.admitted:
                continue
            queue = label
            suspended = bool((job.get("spec") or {}).get("suspend"))
            gpus = _gpus(job)
            if suspended and used.get(queue, 0) + gpus <= self.quotas.get(queue, 0):
                self.admitted[uid] = (queue, gpus)
                used[queue] = used.get(queue, 0) + gpus
                changes.append((job, False))
            elif not suspended:
                changes.append((job, True))  # running without admission: stopped
        return changes
