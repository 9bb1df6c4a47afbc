"""The simulated on-prem cluster, on nodes (a pod's GPUs on one node, placed first fit), as the
ServiceConfig's `onPrem.queueing` says the real one starts waiting jobs (decide/onprem.py
estimates the same): StrictFIFO, nothing past the head; or BestEffortFIFO, first fit in queue
order (also for a policy that schedules on-prem so: starburst). A job that arrives queues (or is
marked as one only a cloud can run), starts when it reaches the head and its pods fit, and leaves
the queue when a policy's dispatch of it is copied to a pool that is up (clouds.py). The jobs
still waiting are kept in queue order as they come and go, for the decisions to read (views.py)."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import Protocol

from burst.model import RunningWorkload
from burst.sim.state import WorldState, runtime_told
from burst.sim.trace import SimJob


class Waking(Protocol):
    def wake_at(self, job: SimJob, runtime: int) -> float | None: ...


class OnPremQueue(WorldState):
    def _arrive(self, i: int, policy: Waking) -> None:
        job = self.jobs[i]
        product = self.product_of[i]
        too_big = not self.clusters[product].could_fit(job.spec.gpus_per_pod, job.spec.pods)
        if too_big:
            self.never_fits.add(i)
        self._wait(i)
        if not too_big:
            heapq.heappush(self.queues[product], (job.spec.submit, i))
            self._start_onprem(product)
        if job.state == "queued":
            self.decide_at(self.now)
            wake = policy.wake_at(job.spec, runtime_told(self, i))
            if wake is not None:
                self._at(wake, "wake", i)

    def _start_onprem(self, product: str) -> None:
        """Start what `product`'s nodes now take (their GPUs were let go, or a job came)."""
        if self.out_of_order:
            self._start_first_fit()
            return
        queue, nodes = self.queues[product], self.clusters[product]
        while queue:
            _, i = queue[0]
            job = self.jobs[i]
            if job.state != "queued":  # it left for a cloud
                heapq.heappop(queue)
                continue
            if not nodes.fits(job.spec.gpus_per_pod, job.spec.pods):
                return  # nothing overtakes the head
            heapq.heappop(queue)
            self._start(i)

    def _start_first_fit(self) -> None:
        """Out of order, as Starburst schedules on-prem: each queued job, in queue order, starts if
        its pods fit the nodes' free GPUs, a small job past a big one that does not fit. Each
        start is the first in queue order of the lines of one product and pod shape whose first
        fits: one passed over fits no better later in the pass (starts only take GPUs), and every
        job waiting was looked at on every arrival and end, most of each replay under config/."""
        clusters = self.clusters
        while any(nodes.total for nodes in clusters.values()):
            first = None
            for (product, per, pods), line in self.fit_lines.items():
                if (
                    line
                    and (first is None or line[0] < first)
                    and clusters[product].fits(per, pods)
                ):
                    first = line[0]
            if first is None:
                return
            self._start(first)

    def _start(self, i: int) -> None:
        job, product = self.jobs[i], self.product_of[i]
        nodes = self.clusters[product]
        self.placed[i] = nodes.place(job.spec.gpus_per_pod, job.spec.pods)
        if job.planned_pool is not None:  # it started here before its pool was ready
            self._unplan(i)
        job.state, job.started = "onprem", self.now
        self._unwait(i)
        end = self.now + job.spec.duration
        # The decision expects it to end when the runtime it was told says (not when it will).
        expected = self.dt(self.now + runtime_told(self, i))
        started = self.dt(self.now)
        self.onprem_kept = None
        self.running[i] = tuple(
            RunningWorkload(
                f"{i}-{n}", product, job.spec.gpus_per_pod, expected, started, nodes.names[k]
            )
            for n, k in enumerate(self.placed[i])
        )
        self._at(end, "onprem-end", i)

    def _onprem_end(self, i: int) -> None:
        job = self.jobs[i]
        job.state, job.finished = "done", self.now
        self.learned.observe(job.spec.team, job.spec.job_id, job.spec.gpus, job.spec.duration)
        del self.running[i]
        self.onprem_kept = None
        product = self.product_of[i]
        for k in self.placed.pop(i):
            self.clusters[product].add(k, job.spec.gpus_per_pod)
        self.onprem_gpu_s += job.spec.gpus * job.spec.duration
        self._start_onprem(product)

    def queued(self) -> list[int]:
        """Jobs still waiting, in queue order (those too big for on-prem last)."""
        return self.waiting_fits + self.waiting_big

    def _wait(self, i: int) -> None:
        # Arrivals come in index order and land at the end; a job sent back finds its old place.
        if i in self.waiting:
            return
        self.waiting.add(i)
        if i in self.never_fits:
            insort(self.waiting_big, i)
            return
        insort(self.waiting_fits, i)
        insort(self.fit_lines.setdefault(self._line_of(i), []), i)

    def _line_of(self, i: int) -> tuple[str, int, int]:
        spec = self.jobs[i].spec
        return (self.product_of[i], spec.gpus_per_pod, spec.pods)

    def _unwait(self, i: int) -> None:
        if i in self.waiting:
            self.waiting.discard(i)
            self.queued_as.pop(i, None)
            lines = (
                (self.waiting_big,)
                if i in self.never_fits
                else (self.waiting_fits, self.fit_lines[self._line_of(i)])
            )
            for line in lines:
                del line[bisect_left(line, i)]

    def _copied(self, planned: list[int]) -> None:
        """Jobs planned onto a pool that is up are copied there and leave the queue, their copies
        waiting in the remote cluster for room; on a strict queue those behind them that fit
        start now (out of order they would have started already: leaving frees no GPU)."""
        for i in planned:
            self._unwait(i)
            self.jobs[i].state = "remote"
        if not self.out_of_order:
            for product in sorted({self.product_of[i] for i in planned}):
                self._start_onprem(product)

    def _requeue(self, i: int) -> None:
        job = self.jobs[i]
        job.state = "queued"
        self._wait(i)
        if i in self.never_fits:
            return
        heapq.heappush(self.queues[self.product_of[i]], (job.spec.submit, i))
        self._start_onprem(self.product_of[i])
