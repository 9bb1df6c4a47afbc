"""A lower bound on the cloud cost of meeting every deadline of a trace (`burst simulate` reports
each policy's cost as a ratio to it; docs/lower-bound.md explains why it is valid).

The relaxation: on-prem is one pool of C GPUs, free of the cluster's fragmentation and queue
order; a job's work (GPUs x duration, in GPU-seconds) is divisible and preemptible, and may run on
on-prem GPUs at any time between its submission and its deadline, at any width; whatever on-prem
does not do runs in a cloud at the cheapest per-GPU price the policy could ever pay for that job,
with no provisioning time, no idle time and no billing minimum. Every real schedule that meets
every deadline is a feasible point of this relaxation, so its optimum is a lower bound.

Solving it exactly: the work on-prem can do for a set of jobs S, f(S), is the value of a maximum
flow from the jobs to time slots whose windows are intervals; for a single machine of speed C it
is found by earliest-deadline-first processing that drops work at its deadline (Glover's greedy for
convex bipartite graphs). f is the rank function of a polymatroid, so maximising the money saved
on-prem, sum(price_j x onprem_j), is solved by the greedy in order of decreasing price (Edmonds):
jobs of the most expensive class get f(that class) of on-prem work, the next class gets what adding
it to the union adds, and so on.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby


@dataclass(frozen=True, slots=True)
class BoundJob:
    release: int  # seconds
    deadline: int
    work: int  # GPU-seconds
    price: float  # cloud cost of one GPU-second of this job, in the report's currency


@dataclass(frozen=True)
class Bound:
    cost: float  # the lower bound on cloud cost
    cloud_work: float  # GPU-seconds the relaxation must still send to a cloud
    total_work: int


def onprem_work(jobs: Sequence[BoundJob], gpus: int) -> float:
    """The most GPU-seconds `gpus` on-prem GPUs can do of `jobs`, each within its window."""
    order = sorted(jobs, key=lambda j: j.release)
    heap: list[tuple[int, float]] = []  # (deadline, work left) of released jobs
    done = 0.0
    i, t = 0, 0.0
    while i < len(order) or heap:
        if not heap:
            t = max(t, order[i].release)
        while i < len(order) and order[i].release <= t:
            heapq.heappush(heap, (order[i].deadline, float(order[i].work)))
            i += 1
        until = order[i].release if i < len(order) else float("inf")
        while heap and t < until:
            deadline, left = heap[0]
            if deadline <= t:
                heapq.heappop(heap)  # its window closed: the rest of it is cloud work
                continue
            end = min(until, deadline, t + left / gpus)
            if end in (until, deadline):
                used = (end - t) * gpus
                heapq.heapreplace(heap, (deadline, left - used))
            else:  # the job's work is done (exactly, whatever the rounding of `end`)
                used = left
                heapq.heappop(heap)
            done += used
            t = end
    return done


def lower_bound(jobs: Sequence[BoundJob], gpus: int) -> Bound:
    """The relaxation's optimal cloud cost with `gpus` on-prem GPUs."""
    total = sum(j.work for j in jobs)
    full = sum(j.work * j.price for j in jobs)
    if gpus <= 0:
        return Bound(full, float(total), total)
    by_price = sorted(jobs, key=lambda j: -j.price)
    saved, before = 0.0, 0.0
    union: list[BoundJob] = []
    for price, group in groupby(by_price, key=lambda j: j.price):
        union.extend(group)
        now = onprem_work(union, gpus)
        saved += price * (now - before)
        before = now
    return Bound(max(0.0, full - saved), total - before, total)
