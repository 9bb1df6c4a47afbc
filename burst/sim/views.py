"""What a policy sees of the replay at a decision: the jobs still queued, in queue order, each as the
Workload the service would see, and each live pool as the PoolView the reconciler would build.

The World (simulate.py) asks a policy what to do at every decision tick, some 20,000 times over
Philly; between two of them only a few jobs arrive, start or end and only a few pools change. So
nothing here is rebuilt per decision: the queue is kept in order as jobs come and go (queue.py), a
job's Workload is made once, and a pool's view is rebuilt only when something it shows has changed
(clouds.py marks the pool on every such event: nodes requested, up or gone, jobs planned, started or
ended, the pool idle or not), and at each decision while its view moves with the clock: work
planned onto it has not started (it is expected to end a runtime from now), or a run there is past
its told end (expected to run on as long as it has run). `rebuilt_pool_views` builds every view
from scratch, for tests to hold the kept views against.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import cast

from burst.amounts import Money
from burst.decide.existing import SENT_WINDOW
from burst.decide.pools import first_fit
from burst.model import OnPrem, PoolView, Workload
from burst.runtimes import run_end
from burst.sim.clouds import CloudPools
from burst.sim.state import Pool, WorldState, runtime_told, told_runtime


def pool_view(world: WorldState, pool: Pool, last: PoolView | None = None) -> PoolView:
    """The pool as the decision sees it now, built from its nodes and planned jobs (and from its
    `last` view what never changes)."""
    free = [n.free for n in pool.alive]
    # When each node's work is expected to end, by the runtimes the decision is told, as the
    # service dates it (service/loop.py): a runtime after the run started (the service sees it
    # start at its next sync; past that, as runtimes.run_end says), or for work not started, a
    # runtime from now.
    jobs, now = world.jobs, world.now
    busy = [
        max((run_end((j := jobs[i]).run_start, j.told_end, now) for i in n.jobs), default=None)
        for n in pool.alive
    ]
    for i in pool.planned:  # planned work holds its room, as in the reconciler
        s = world.jobs[i].spec
        spots = first_fit(free, s.gpus_per_pod, s.pods)
        for k in spots or []:
            free[k] -= s.gpus_per_pod
            end = world.now + runtime_told(world, i)
            busy[k] = max(end, busy[k] or end)
    # Nodes a resize added are on their way until up (the pool up and running its jobs meanwhile),
    # asked for when the last of them was, as the service dates a resize from its last change.
    coming = [n for n in pool.alive if n.ready_at > world.now] if pool.state == "ready" else []
    return PoolView(
        name=pool.name,
        target=pool.target,
        policy=pool.policy,
        offer=pool.offer,
        nodes=len(free),
        state="ready" if pool.state == "ready" else "creating",
        created=last.created if last else world.dt(pool.created),
        free_gpus=tuple(free),
        idle_since=None if pool.idle_since is None else world.dt(pool.idle_since),
        hourly=last.hourly if last else Money(pool.hourly_micros, "USD"),
        busy_until=tuple(None if b is None else world.dt(b) for b in busy),
        nodes_up=len(free) - len(coming) if coming else None,
        resized_at=world.dt(max(n.requested for n in coming)) if coming else None,
    )


def moves_from(world: WorldState, pool: Pool) -> float | None:
    """From when the pool's view moves with the clock (None: it does not): at once with work
    planned and not started (expected to end a runtime from now), else from the first of its
    runs' told ends (past it, a run is expected to run on as long as it has run)."""
    if pool.planned:
        return -math.inf
    return min((world.jobs[i].told_end for n in pool.alive for i in n.jobs), default=None)


def rebuilt_pool_views(world: WorldState) -> tuple[PoolView, ...]:
    """Every live pool's view built afresh: what the kept views must equal at any decision."""
    return tuple(pool_view(world, pool) for pool in world.pools.values())


class Views(CloudPools):
    """The queued jobs and the live pools as a decision sees them, kept across decisions."""

    def workload(self, i: int) -> Workload:
        """Job i as the service would see it pending (made once: nothing in it changes)."""
        w = self.workloads.get(i)
        if w is None:
            s = self.jobs[i].spec
            told = told_runtime(self, i)
            submitted = self.dt(s.submit)
            w = Workload(
                uid=str(i),
                kind="Job",
                namespace=s.team,
                name=s.job_id,
                team=s.team,
                gpus_per_pod=s.gpus_per_pod,
                pods=s.pods,
                created=submitted,
                pending_since=submitted,
                accelerator=self.asks[i],
                burstable=True,
                deadline=self.dt(s.deadline),
                expected_runtime=None if told is None else timedelta(seconds=told),
                longest_runtime=self.longest.get(i),
            )
            self.workloads[i] = w
        return w

    def queued_workloads(self) -> tuple[Workload, ...]:
        """The queued jobs in queue order, those planned onto a pool as planned."""
        seen = self.queued_as
        return tuple([seen.get(i) or self._queued_as(i) for i in self.queued()])

    def _queued_as(self, i: int) -> Workload:
        w = self.workload(i)
        planned = self.jobs[i].planned_pool
        if planned is not None:
            w = replace(w, phase="planned", planned_pool=planned.name)
        if self.jobs[i].restarts:  # a run of it was lost, as the service's loop tells the plan
            w = replace(w, lost_copy=True)
        self.queued_as[i] = w
        return w

    def onprem(self) -> OnPrem:
        """The on-prem cluster as the service's watch would show it, the same object until a job
        starts or ends there: a plan keeps what it worked out of the last it saw
        (decide/cluster.py), and most decisions of a replay come with nothing changed on-prem."""
        if self.onprem_kept is None:
            running = tuple(r for pods in self.running.values() for r in pods)
            self.onprem_kept = OnPrem(dict(self.capacity), running, self.onprem_nodes)
        return self.onprem_kept

    def sent_last_hour(self) -> dict[str, int]:
        """How many jobs each policy sent to a cloud in the hour up to now (Snapshot's field)."""
        for times in self.sent.values():
            while times and times[0] <= self.now - SENT_WINDOW.total_seconds():
                times.popleft()
        return {policy: len(times) for policy, times in self.sent.items() if times}

    def pool_views(self) -> tuple[PoolView, ...]:
        """Every live pool's view, in the order of `pools`."""
        self._review()
        return self.view_list

    def pools_with_room(self) -> list[PoolView]:
        """The views of the pools with a GPU free on some node, in the order of `pool_views`."""
        self._review()
        return sorted(self.roomy.values(), key=lambda v: self.rank[v.name])

    def idle_pools(self) -> list[Pool]:
        """The live pools that run nothing and have nothing planned, in the order of `pools`."""
        self._review()
        return sorted(self.idling.values(), key=lambda p: self.rank[p.name])

    def _review(self) -> None:
        """Rebuild the views of the pools changed since the last decision, and those whose views
        move with the clock (moves_from), and only those."""
        if self.viewed_at != self.now:
            self.viewed_at = self.now
            self.stale.update(p for p, since in self.moving.values() if since <= self.now)
        if not self.stale:
            return
        for pool in self.stale:
            name = pool.name
            if self.pools.get(name) is pool:
                view = self.views[name] = pool_view(self, pool, self.views[name])
                if any(view.free_gpus):
                    self.roomy[name] = view
                else:
                    self.roomy.pop(name, None)
                if pool.idle_since is None:
                    self.idling.pop(name, None)
                else:
                    self.idling[name] = pool
                since = moves_from(self, pool)
                if since is None:
                    self.moving.pop(name, None)
                else:
                    self.moving[name] = (pool, since)
            elif name not in self.pools:  # gone (not replaced: its successor is stale too)
                self.roomy.pop(name, None)
                self.idling.pop(name, None)
                self.moving.pop(name, None)
        self.stale.clear()
        # Every live pool is built now: a new one is stale until it is.
        self.view_list = cast(tuple[PoolView, ...], tuple(self.views.values()))
