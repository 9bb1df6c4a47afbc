"""The simulated clouds, as providers/sim.py behaves: pools launched with log-normal latency per
cloud, launches refused for capacity or failing as a whole, spot nodes interrupted (their jobs go
back to the queue, offered no spot again, as the service requeues a copy whose spot node was
reclaimed), the remote autoscaler removing nodes left empty; jobs planned onto a pool start when it
has room: when it comes up, and when a run on it ends or is lost, as the remote scheduler retries
its pending pods once a pod holding a node is gone (kubernetes pkg/scheduler/eventhandlers.go,
deleteAssignedPodFromCache; at the latest after DefaultPodMaxInUnschedulablePodsDuration, 5
minutes). A job planned onto a pool leaves the on-prem queue once the pool is up, as the service
then copies it there (service/remote.py, dispatch_ready), its copy waiting in the remote cluster
for room; until then it may still start on-prem. On a strict queue those behind it that fit start
when it leaves, as Kueue's scheduler takes the next head once a workload is deleted from its
ClusterQueue (kueue pkg/queue/manager.go, DeleteWorkload). Each node is billed from request to
end under its cloud's billing rule, split into overhead (before it is ready), idle (GPU time no
job used) and use."""

from __future__ import annotations

import math
from datetime import timedelta

from burst.config import BurstPolicy
from burst.decide.existing import SENT_WINDOW
from burst.decide.pools import first_fit
from burst.model import CreatePool
from burst.money.meter import BILLING
from burst.sim.queue import OnPremQueue
from burst.sim.state import Node, Pool, runtime_told


class CloudPools(OnPremQueue):
    def _create(self, a: CreatePool) -> bool:
        offer = self.catalog.get(a.offer)
        assert offer is not None, a.offer
        if self.draw("shortage", a.offer).random() < self.clouds.shortage:
            self.refusals += 1
            self.unavailable.mark(a.offer)
            return False
        self.pools_created += 1
        pool = Pool(
            len(self.pool_list), a.pool, a.target, a.policy, a.offer, offer.hourly.micros, self.now
        )
        self._open(pool)
        pool.doomed = self.draw("failure", a.offer).random() < self.clouds.launch_failure
        self._boot(pool, a.nodes)
        return True

    def _boot(self, pool: Pool, count: int) -> None:
        delay = self.clouds.latency[pool.offer.cloud].sample(self.draw("latency", pool.offer))
        # A launch fails as a whole: nodes added while it launches share its fate, and nodes
        # added to a pool that is up come up.
        fails = pool.state == "requested" and pool.doomed
        self._changed(pool)
        for _ in range(count):
            gpus = pool.offer.gpus
            node = Node(gpus, self.now, self.now + delay, gpus)
            pool.nodes.append(node)
            pool.alive.append(node)
        self._at(self.now + delay, "launch-failed" if fails else "nodes-ready", pool.id)

    def _resize(self, pool: Pool, nodes: int) -> None:
        live = pool.alive
        if nodes > len(live):
            self._boot(pool, nodes - len(live))
            return
        for node in [n for n in reversed(live) if not n.jobs][: len(live) - nodes]:
            self._end_node(pool, node)

    def _nodes_ready(self, pool: Pool) -> None:
        if pool.state not in ("requested", "ready"):
            return
        self._changed(pool)
        if pool.state == "requested":
            pool.state = "ready"
            self.unavailable.succeeded(pool.offer)
            self._copied(sorted(pool.planned))
        rate = self.clouds.spot_interruptions_per_hour
        if pool.offer.capacity == "spot" and rate > 0:
            for k, node in enumerate(pool.nodes):
                if node.ended is None and node.ready_at == self.now:
                    lost = self.now + self.draw("reclaim", pool.offer).expovariate(rate) * 3600
                    self._at(lost, "interrupt", (pool.id, k))
        # Idle only if no node runs anything: a node added to a busy pool comes up empty too.
        if pool.idle_since is None and not pool.planned and not any(n.jobs for n in pool.alive):
            pool.idle_since = self.now
        self._start_planned(pool)
        for k, node in enumerate(pool.nodes):
            if node.ended is None and node.ready_at == self.now and not node.jobs:
                self._node_empty(pool, k)
        if pool.idle_since is not None:
            self._idle_timer(pool)

    def _scale_down(self, pool: Pool, k: int) -> None:
        node = pool.nodes[k]
        if (
            node.ended is None
            and node.empty_since is not None
            and self.now - node.empty_since >= self.clouds.scale_down_after_s
            and not pool.planned
        ):
            self._end_node(pool, node)

    def _launch_failed(self, pool: Pool) -> None:
        if pool.state != "requested":
            return
        self.failures += 1
        self.unavailable.mark(pool.offer)
        self._close(pool, "failed")
        self.decide_at(self.now)

    def _plan(self, i: int, pool: Pool) -> None:
        self._unplan(i)
        self.jobs[i].planned_pool = pool
        pool.planned.add(i)
        self._changed(pool)
        self.queued_as.pop(i, None)
        pool.idle_since = None
        if pool.state == "ready":
            self._copied([i])
            self._start_planned(pool)

    def _unplan(self, i: int) -> None:
        job = self.jobs[i]
        pool = job.planned_pool
        if pool is not None:
            pool.planned.discard(i)
            job.planned_pool = None
            self._changed(pool)
            self.queued_as.pop(i, None)
            self._idle_if_empty(pool)
        if job.state == "remote":  # its copy is gone with its pool: the service requeues it
            self._requeue(i)
            self.decide_at(self.now)

    def _start_planned(self, pool: Pool) -> None:
        for i in sorted(pool.planned, key=lambda i: (self.jobs[i].spec.submit, i)):
            job = self.jobs[i]
            spots = first_fit(pool.room(self.now), job.spec.gpus_per_pod, job.spec.pods)
            if spots is None:
                continue
            pool.planned.discard(i)
            job.state, job.pool, job.nodes, job.planned_pool = "cloud", pool, spots, None
            self._changed(pool)
            job.run_start = self.now
            job.told_end = self.now + runtime_told(self, i)
            job.started = self.now if job.started is None else job.started  # a restart keeps it
            for k in spots:
                node = pool.nodes[k]
                node.free -= job.spec.gpus_per_pod
                node.jobs.add(i)
                if node.empty_since is not None:
                    node.empty_s += self.now - node.empty_since
                    node.empty_since = None
            self._hold(i, pool)
            self._at(self.now + job.spec.duration, "cloud-end", (i, job.restarts))

    def _cloud_end(self, i: int, attempt: int) -> None:
        job = self.jobs[i]
        if job.state != "cloud" or job.restarts != attempt:
            return  # the end of a run that was interrupted
        pool = job.pool
        assert pool is not None
        self._release(pool, i)
        job.state, job.finished, job.ran_in_cloud = "done", self.now, True
        self.learned.observe(job.spec.team, job.spec.job_id, job.spec.gpus, job.spec.duration)
        self._charge(i, pool)
        self._start_planned(pool)  # in the room the run left
        if self.waiting and self._freed_room_matters(pool):
            self.decide_at(self.now)

    def _freed_room_matters(self, pool: Pool) -> bool:
        """Whether a decision at a cloud job's end may do what the next would not (the service
        plans every pass): its room may take a job the last one left waiting for room (at the
        pool cap it is the only room), or work planned onto a pool now late to launch may move
        (Plan.more_from); its pool, now empty, may go; and where runtimes are not exact, or the
        cluster runs its queue out of order, estimates change between decisions (a best-effort
        estimate is not the cluster's run to the second: a Philly replay came out 0.01 % dearer
        without those decisions). Otherwise a plan there changes nothing: with exact runtimes and
        a strict queue an estimate changes only at a decision tick, as the queue does."""
        more = self.more_from
        return (
            (more is not None and more <= self.now)
            or pool.idle_since is not None
            or self.runtimes != "exact"
            or self.out_of_order
        )

    def _release(self, pool: Pool, i: int) -> None:
        job = self.jobs[i]
        self._changed(pool)
        for k in job.nodes:
            node = pool.nodes[k]
            node.free += job.spec.gpus_per_pod
            node.jobs.discard(i)
            node.used_gpu_s += job.spec.gpus_per_pod * (self.now - job.run_start)
            if not node.jobs:
                self._node_empty(pool, k)
        job.nodes, job.pool = [], None
        self._idle_if_empty(pool)

    def _node_empty(self, pool: Pool, k: int) -> None:
        """Node k runs nothing now: the remote autoscaler removes it if it stays so."""
        pool.nodes[k].empty_since = self.now
        self._at(self.now + self.clouds.scale_down_after_s, "scale-down", (pool.id, k))

    def _idle_if_empty(self, pool: Pool) -> None:
        if not pool.planned and not any(n.jobs for n in pool.alive):
            pool.idle_since = self.now
            self._changed(pool)
            self._idle_timer(pool)

    def _idle_timer(self, pool: Pool) -> None:
        policy = self.config.policies.get(pool.policy)
        ttl = policy.spec.teardown.idle_ttl if policy else timedelta(minutes=10)
        self._at(self.now + ttl.total_seconds(), "idle-check", pool.id)
        if self._next_arrival(pool):
            self._at(self.now, "idle-check", pool.id)  # it may go at once, with no work in sight

    def _next_arrival(self, pool: Pool) -> BurstPolicy | None:
        """The pool's policy, when burst's replay chooses its idle TTL against the next arrival."""
        policy = self.config.policies.get(pool.policy)
        if (
            self.idle_checked_at_once
            and policy
            and policy.spec.teardown.idle_ttl_choice == "next-arrival"
        ):
            return policy
        return None

    def _idle_recheck(self, pool: Pool) -> None:
        """An idle pool of a next-arrival policy is asked about again when its policy's last hour
        of sends (WorldState.sends), with none more, falls below one per launch of its target
        (what keeps it), as the service asks on every pass; the TTL asks anyway."""
        policy = self._next_arrival(pool)
        if policy is None or pool.idle_since is None:
            return
        launch = next((t.provisioning for t in self.service.targets if t.name == pool.target), None)
        times = self.sends(pool.policy)
        if not launch or not times:  # a launch that takes no time keeps no pool idle
            return
        needed = math.ceil(SENT_WINDOW / launch)  # sends in an hour that keep an idle pool
        if len(times) >= needed:
            falls = times[-needed] + SENT_WINDOW.total_seconds()
            if self.now < falls < pool.idle_since + policy.spec.teardown.idle_ttl.total_seconds():
                self._at(falls, "idle-check", pool.id)

    def _interrupt(self, pool: Pool, k: int) -> None:
        node = pool.nodes[k]
        if node.ended is None:
            self.interruptions += 1
            self._lose(pool, [node])
            self._start_planned(pool)  # in the room its lost jobs' pods on other nodes left
            self.decide_at(self.now)

    def _lose(self, pool: Pool, nodes: list[Node]) -> None:
        """Nodes go (interrupted, or their pool deleted): their jobs go back to the queue, as the
        service requeues a lost copy's workload, and are offered no spot again."""
        victims = sorted({i for n in nodes for i in n.jobs})
        for i in victims:
            self._release(pool, i)
            self._unhold(i, pool)
            self.jobs[i].restarts += 1
            self.queued_as.pop(i, None)  # seen again as a lost copy's workload (views.py)
        for node in nodes:
            self._end_node(pool, node)
        for i in victims:  # back in their place in the queue; the policy decides again
            self._requeue(i)

    def _close(self, pool: Pool, state: str) -> None:
        for i in list(pool.planned):
            self._unplan(i)
        self._lose(pool, pool.nodes)
        pool.state, pool.closed = state, self.now
        self._gone(pool)

    def _end_node(self, pool: Pool, node: Node) -> None:
        if node.ended is not None:
            return
        node.ended = self.now
        pool.alive.remove(node)
        self._changed(pool)
        if node.empty_since is not None:
            node.empty_s += max(0.0, node.ended - node.empty_since)
        cost, overhead, idle, idle_empty = _bill(pool, node)
        self.cost += cost
        self.overhead += overhead
        self.idle += idle
        self.idle_empty += idle_empty
        cloud = pool.offer.cloud
        self.by_provider[cloud] = self.by_provider.get(cloud, 0) + cost


def _bill(pool: Pool, node: Node) -> tuple[int, int, int, int]:
    """What an ended node cost under its cloud's billing rule, in USD micros, and of that its
    overhead (before it was ready), its idle GPU time and the idle of it spent running nothing."""
    assert node.ended is not None
    cost = pool.hourly_micros * BILLING[pool.offer.cloud].billable(node.ended - node.requested)
    cost //= 3600
    booting = min(node.ready_at, node.ended) - node.requested
    overhead = min(cost, pool.hourly_micros * math.ceil(booting) // 3600)
    up_gpu_s = node.gpus * max(0.0, node.ended - node.ready_at)
    idle = pool.hourly_micros * max(0.0, up_gpu_s - node.used_gpu_s) / (3600 * node.gpus)
    idle = min(cost - overhead, int(idle))
    return cost, overhead, idle, min(idle, pool.hourly_micros * int(node.empty_s) // 3600)
