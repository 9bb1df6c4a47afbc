"""A lower bound on the cloud cost of meeting every deadline of a trace (`burst simulate` reports
each policy's cost as a ratio to it; docs/lower-bound.md explains why it is valid).

The relaxation: on-prem is one pool of C GPUs, free of the cluster's fragmentation and queue
order; a job's work (GPUs x duration, in GPU-seconds) is divisible and preemptible, and may run on
on-prem GPUs at any time between its submission and its deadline on at most as many GPUs as the
job asks for; whatever on-prem does not do runs in a cloud at the cheapest per-GPU price the policy
could ever pay for that job, with no provisioning time, no idle time and no billing minimum. Every
real schedule that meets every deadline is a feasible point of this relaxation, so its optimum is a
lower bound.

Solving it: the work on-prem can do for a set of jobs S, f(S), is the value of a maximum flow from
the jobs (capacity: their work) through the time slots of their windows (capacity: the job's GPUs
x slot length) to the on-prem GPUs (capacity: C x slot length). The supplies a flow network can
deliver form a polymatroid with rank function f, so maximising the money saved on-prem,
sum(price_j x onprem_j), is solved by the greedy in order of decreasing price (Edmonds): the most
expensive jobs get f(that class) of on-prem work, the next class what adding it to the union adds,
and so on. The flow runs on a grid of time slots; windows are widened to the grid and capacities
rounded up, which only relaxes the problem further, so the bound stays valid (and is exact when the
grid is one second).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import maximum_flow

# Grid steps tried from the finest until the network has at most EDGE_BUDGET job-slot edges: a
# coarser grid gives a looser bound, a finer one a slower flow (Philly: about 2 million edges at
# one hour, a third of a second; the bound is the same at 15 minutes).
GRID_S = (1, 60, 300, 900, 3600, 4 * 3600, 86400)
EDGE_BUDGET = 3_000_000
_INT32 = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BoundJob:
    release: int  # seconds
    deadline: int
    work: int  # GPU-seconds
    price: float  # cloud cost of one GPU-second of this job, in the report's currency
    width: int  # the most GPUs the job runs on at once


@dataclass(frozen=True)
class Bound:
    cost: float  # the lower bound on cloud cost
    cloud_work: float  # GPU-seconds the relaxation must still send to a cloud
    total_work: int


def grid_step(jobs: Sequence[BoundJob]) -> int:
    """The finest step of GRID_S whose network stays within EDGE_BUDGET edges."""
    for step in GRID_S:
        edges = sum(-(-j.deadline // step) - j.release // step for j in jobs)
        if edges <= EDGE_BUDGET:
            return step
    return GRID_S[-1]


def onprem_work(jobs: Sequence[BoundJob], gpus: int, step: int | None = None) -> float:
    """At least as many GPU-seconds as `gpus` on-prem GPUs can do of `jobs`, each within its
    window and on at most its width (exactly as many when `step` is 1)."""
    if not jobs or gpus <= 0:
        return 0.0
    step = step or grid_step(jobs)
    first = np.array([j.release // step for j in jobs], dtype=np.int64)
    end = np.array([-(-j.deadline // step) for j in jobs], dtype=np.int64)
    # Grid cells no window starts or ends in have the same jobs as their neighbour: one slot holds
    # them all, which changes no maximum flow and keeps the network small.
    cuts = np.unique(np.concatenate([first, end]))
    lo = np.searchsorted(cuts, first)
    counts = np.searchsorted(cuts, end) - lo
    slot_len = np.diff(cuts) * step  # seconds in each slot
    work = np.array([j.work for j in jobs], dtype=np.int64)
    width = np.array([j.width for j in jobs], dtype=np.int64)
    # One unit of flow is `unit` GPU-seconds so that every capacity and the total fit in 32 bits;
    # capacities round up, so the flow can only overstate what on-prem does.
    unit = max(1, math.ceil(int(work.sum()) / 2**30))
    n, slots = len(jobs), len(slot_len)
    job_of_edge = np.repeat(np.arange(n), counts)
    slot_of_edge = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    edge_cap = np.minimum(width[job_of_edge] * slot_len[slot_of_edge], work[job_of_edge])
    slot_cap = np.minimum(gpus * slot_len, np.bincount(slot_of_edge, edge_cap, slots))
    source, sink, job0, slot0 = 0, 1, 2, 2 + n
    rows = np.concatenate([np.zeros(n, np.int64), job0 + job_of_edge, slot0 + np.arange(slots)])
    cols = np.concatenate([job0 + np.arange(n), slot0 + slot_of_edge, np.full(slots, sink)])
    caps = -(-np.concatenate([work, edge_cap, slot_cap.astype(np.int64)]) // unit)
    graph = csr_array(
        (np.minimum(caps, _INT32).astype(np.int32), (rows, cols)), shape=(slot0 + slots,) * 2
    )
    return float(maximum_flow(graph, source, sink, method="dinic").flow_value * unit)


def lower_bound(jobs: Sequence[BoundJob], gpus: int) -> Bound:
    """The relaxation's optimal cloud cost with `gpus` on-prem GPUs."""
    total = sum(j.work for j in jobs)
    full = sum(j.work * j.price for j in jobs)
    if gpus <= 0 or not jobs:
        return Bound(full, float(total), total)
    step = grid_step(jobs)
    by_price = sorted(jobs, key=lambda j: -j.price)
    saved, before = 0.0, 0.0
    union: list[BoundJob] = []
    for price, group in groupby(by_price, key=lambda j: j.price):
        union.extend(group)
        # Each estimate of f may exceed it (rounding); the saving is sum over classes of
        # (price_k - price_k+1) x f(union_k), so over-estimates only lower the bound.
        now = min(float(sum(j.work for j in union)), onprem_work(union, gpus, step))
        saved += price * (now - before)
        before = now
    return Bound(max(0.0, full - saved), max(0.0, total - before), total)
