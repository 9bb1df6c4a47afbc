"""What the soak feeds the on-prem cluster: a window of a shipped trace as real Jobs and
PyTorchJobs, compressed in time, with deadlines, runtimes and burstable labels, and hostile and
malformed jobs mixed in.

The trace's rows carry submit times, durations and GPU counts; the rest follows seeded rules:
- **Window**: `days` from `start_day` of the trace, jobs of at most 8 GPUs (the on-prem nodes have
  4), every k-th one so that at most `jobs` remain, in submit order.
- **Time**: trace seconds divided by `compress` (720: a trace hour is 5 s), at least 1 s a job;
  runs capped at `longest` trace seconds (a month-long Philly job would outlast any soak).
- **Kind**: 8-GPU jobs are PyTorchJobs of a master and a worker of 4 GPUs; a fifth of the others
  too (a master alone), the rest batch Jobs of one pod.
- **Team**: the trace's user hashed onto the namespaces; `theory` has a small hard budget.
- **Deadline**: created + slack x runtime + `allowance` (slack uniform 1.5-4, as `burst simulate`),
  on 60 % of the jobs; **burstable** on 80 %.
- **Hostile** (3 %): a hostPath volume, which burst must refuse to copy, with an Event saying so.
  **Malformed** (2 %): a deadline no one can read, which burst must name in an Event.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.demo.scenario import job_manifest
from burst.sim import trace

PHILLY = (
    Path(__file__).parents[2] / "burst" / "data" / "traces" / "microsoft-philly-2017-public.csv"
)
NAMESPACES = ("cms-ml", "atlas-ml", "theory")
SECRET = "wandb-api-key"  # every job reads it; its value must never show outside the clusters


@dataclass(frozen=True)
class Job:
    at: float  # seconds after the feed starts
    kind: str  # Job or PyTorchJob
    namespace: str
    name: str
    body: dict[str, Any]
    hostile: bool = False
    malformed: bool = False


def window(start_day: float, days: float, jobs: int, path: Path = PHILLY) -> list[trace.TraceJob]:
    rows = trace.read(path)
    first = rows[0].submit + start_day * 86400
    last = first + days * 86400
    chosen = [r for r in rows if first <= r.submit < last and r.gpus <= 8]
    step = max(1, -(-len(chosen) // jobs))
    return chosen[::step][:jobs]


def team(owner: str) -> str:
    digest = hashlib.blake2b(owner.encode(), digest_size=4).digest()
    return NAMESPACES[int.from_bytes(digest, "big") % len(NAMESPACES)]


def jobs(
    rows: list[trace.TraceJob],
    *,
    compress: float,
    allowance: float,
    seed: int,
    longest: int = 2 * 86400,
) -> list[Job]:
    rng = random.Random(seed)
    start = rows[0].submit if rows else 0
    out = []
    for i, row in enumerate(rows):
        seconds = max(1, round(min(row.duration, longest) / compress))
        deadline = None
        if rng.random() < 0.6:
            deadline = f"{round(rng.uniform(1.5, 4.0) * seconds + allowance)}s"
        hostile, malformed = rng.random() < 0.03, False
        if not hostile and rng.random() < 0.02:
            malformed, deadline = True, "next tuesday"
        pod: dict[str, Any] = {}
        if hostile:
            pod["volumes"] = [{"name": "host", "hostPath": {"path": "/var/lib"}}]
        # As users name jobs: a name of their own, then what a template generates, which burst
        # strips to learn runtimes by the first (so that what it learns grows with the names,
        # not with the jobs). The trace names no user: the name is the job's size.
        name = f"train-{row.gpus}g-{i:05d}-{row.job_id[-6:].lower().replace('_', '-')}"
        gpus = min(row.gpus, 4)
        body = job_manifest(
            name,
            gpus,
            deadline=deadline,
            burstable=rng.random() < 0.8 or hostile or malformed,
            seconds=seconds,
            **pod,
        )
        kind = "PyTorchJob" if row.gpus > 4 or rng.random() < 0.2 else "Job"
        if kind == "PyTorchJob":
            body = _pytorchjob(body, workers=1 if row.gpus > 4 else 0)
        out.append(
            Job(
                (row.submit - start) / compress,
                kind,
                team(row.owner),
                name,
                body,
                hostile=hostile,
                malformed=malformed,
            )
        )
    return out


def _pytorchjob(job: dict[str, Any], workers: int) -> dict[str, Any]:
    template = job["spec"]["template"]
    specs: dict[str, Any] = {"Master": {"replicas": 1, "template": template}}
    if workers:
        specs["Worker"] = {"replicas": workers, "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": job["metadata"],
        "spec": {"pytorchReplicaSpecs": specs},
    }


def create(local: Any, job: Job) -> None:
    """Create `job` in the on-prem cluster (`local`: a KubeObjects)."""
    if job.kind == "Job":
        local.batch.create_namespaced_job(job.namespace, job.body, _preload_content=False)
    else:
        local.custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", job.namespace, "pytorchjobs", job.body, _preload_content=False
        )


def prepare(local: Any, secret_value: str) -> None:
    """The namespaces and the Secret every job reads."""
    for ns in NAMESPACES:
        local.ensure_namespace(ns)
        local.core.create_namespaced_secret(
            ns,
            {"metadata": {"name": SECRET}, "stringData": {"k": secret_value}},
            _preload_content=False,
        )
