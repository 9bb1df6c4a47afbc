"""The simulated on-prem cluster: strict FIFO per GPU product, the queue decide/onprem.py estimates. A job
that arrives queues (or is marked as one only a cloud can run), starts when it reaches the head and
its GPUs are free, and leaves the queue when a policy sends it to a cloud."""

from __future__ import annotations

import heapq
from typing import Protocol

from burst.model import RunningWorkload
from burst.sim.state import WorldState
from burst.sim.trace import SimJob


class Waking(Protocol):
    def wake_at(self, job: SimJob) -> float | None: ...


class OnPremQueue(WorldState):
    def _arrive(self, i: int, policy: Waking) -> None:
        job = self.jobs[i]
        self.waiting.add(i)
        if job.spec.gpus > self.capacity[self.product]:
            self.never_fits.add(i)
        else:
            heapq.heappush(self.queue, (job.spec.submit, i))
            self._start_onprem()
        if job.state == "queued":
            self.decide_at(self.now)
            wake = policy.wake_at(job.spec)
            if wake is not None:
                self._at(wake, "wake", i)

    def _start_onprem(self) -> None:
        while self.queue:
            _, i = self.queue[0]
            job = self.jobs[i]
            if job.state != "queued":  # it left for a cloud
                heapq.heappop(self.queue)
                continue
            if job.spec.gpus > self.free[self.product]:
                return  # nothing overtakes the head
            heapq.heappop(self.queue)
            self.free[self.product] -= job.spec.gpus
            if job.planned_pool is not None:  # it started here before its pool was ready
                self._unplan(i)
            job.state, job.started = "onprem", self.now
            self.waiting.discard(i)
            end = self.now + job.spec.duration
            self.running[i] = RunningWorkload(str(i), self.product, job.spec.gpus, self.dt(end))
            self._at(end, "onprem-end", i)

    def _onprem_end(self, i: int) -> None:
        job = self.jobs[i]
        job.state, job.finished = "done", self.now
        del self.running[i]
        self.free[self.product] += job.spec.gpus
        self.onprem_gpu_s += job.spec.gpus * job.spec.duration
        self._start_onprem()

    def queued(self) -> list[int]:
        """Jobs still waiting, in queue order (those too big for on-prem last)."""
        fits = sorted(i for i in self.waiting if i not in self.never_fits)
        return fits + sorted(self.waiting & self.never_fits)

    def _requeue(self, i: int) -> None:
        job = self.jobs[i]
        job.state = "queued"
        self.waiting.add(i)
        if i in self.never_fits:
            return
        heapq.heappush(self.queue, (job.spec.submit, i))
        self._start_onprem()
