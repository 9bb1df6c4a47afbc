"""The policy simulator: replay a job trace on virtual time through an on-prem cluster, a policy and
simulated clouds, and measure what it costs and how long jobs take.

`burst simulate` reads a trace (trace.py); `World.run(policy)` replays it here as a discrete-event
simulation. The on-prem cluster is strict FIFO per GPU product, the queue onprem.py estimates. A
policy is asked what to do at decision ticks, on the ServiceConfig's reconcile interval, after
a change that can call for a decision: a job that has to queue arrives, a launch fails, a node is
lost, a pool has been idle for its TTL, or a timer the policy asked for is due. (Jobs ending, on-prem
or in a cloud, and nodes coming up do not: with exact runtimes they only make estimates better.) and answers with the actions
of model.py: `Burst` builds the Snapshot the service would and calls the same `decide.plan`; the
baselines (baselines.py) answer with the same action types. Clouds behave like providers/sim.py:
log-normal provisioning latency per cloud, launches refused for capacity (the offer is backed off
and the policy asked again at once, as the reconciler does), launches that fail, spot nodes
interrupted (their jobs go back to the queue). Everything random comes from one seed. Runtimes are
the trace's durations, known to every policy; a job runs as long in a cloud as on-prem.

Pools are billed per node from request to deletion under each cloud's billing rule (meter.py).
Node time before a node is ready is overhead; GPU time on ready nodes that no job uses is idle.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Protocol

from burst import decide, ledger
from burst.catalog import Catalog, UnavailableOffers
from burst.config import BurstPolicy, Config
from burst.meter import BILLING
from burst.model import (
    Action,
    BudgetView,
    CancelDispatch,
    Cloud,
    CreatePool,
    DeletePool,
    Dispatch,
    OfferKey,
    OnPrem,
    PoolView,
    ResizePool,
    RunningWorkload,
    Snapshot,
    Workload,
)
from burst.money import Money
from burst.trace import SimJob
from providers.sim import LATENCY, Latency

START = datetime(2026, 1, 5, tzinfo=UTC)  # virtual time 0, a Monday: budget weeks line up
CAPACITY_REPLANS = 3


@dataclass(frozen=True)
class CloudModel:
    """How the simulated clouds misbehave, besides their latency (providers/sim.py's model)."""

    shortage: float = 0.02  # chance that a cloud refuses a pool for capacity
    launch_failure: float = 0.01  # chance that a launched pool never becomes ready
    spot_interruptions_per_hour: float = 0.05  # per spot node
    # The remote cluster's autoscaler removes a node that has been empty this long (the
    # cluster-autoscaler default); burst sets a pool's size, the autoscaler trims it.
    scale_down_after_s: float = 600.0
    latency: Mapping[Cloud, Latency] = field(default_factory=lambda: dict(LATENCY))


DEFAULT_CLOUDS = CloudModel()


@dataclass
class Job:
    spec: SimJob
    state: str = "queued"  # queued, onprem, cloud, done
    started: float | None = None
    finished: float | None = None
    planned_pool: Pool | None = None
    pool: Pool | None = None
    nodes: list[int] = field(default_factory=list)  # the pool's nodes its pods run on
    run_start: float = 0.0  # of its current run in a cloud
    restarts: int = 0
    ran_in_cloud: bool = False


@dataclass(eq=False)
class Node:
    gpus: int
    requested: float
    ready_at: float
    free: int
    ended: float | None = None
    used_gpu_s: float = 0.0
    empty_since: float | None = None  # up and running nothing since then
    jobs: set[int] = field(default_factory=set)


@dataclass(eq=False)
class Pool:
    id: int  # names come back after a pool is gone; events and jobs hold the pool itself
    name: str
    target: str
    policy: str
    offer: OfferKey
    hourly_micros: int  # USD per node-hour
    created: float
    nodes: list[Node] = field(default_factory=list)  # every node it ever had (jobs index these)
    alive: list[Node] = field(default_factory=list)  # those not ended, in the same order
    state: str = "requested"  # requested, ready, deleted, failed
    idle_since: float | None = None
    planned: set[int] = field(default_factory=set)  # jobs waiting for room on it
    doomed: bool = False  # its launch will fail (drawn when it is created)

    def room(self, now: float) -> list[int]:
        """GPUs free per node that is up now (0 for nodes still booting or gone)."""
        return [n.free if n.ended is None and n.ready_at <= now else 0 for n in self.nodes]


@dataclass
class Outcome:
    """What one policy did with one trace: the figures `burst simulate` reports."""

    policy: str
    jobs: int
    cost_usd_micros: int
    overhead_usd_micros: int
    idle_usd_micros: int
    by_provider: dict[str, int]
    pools_created: int
    deadlines_met: float
    mean_jct_s: float
    p90_jct_s: float
    mean_queue_s: float
    p90_queue_s: float
    onprem_utilisation: float
    burst_jobs: int
    unfinished: int
    capacity_refusals: int
    launch_failures: int
    interruptions: int
    decisions: int


class Policy(Protocol):
    name: str

    def decide(self, world: World) -> Sequence[Action]:
        """The actions to take now (world.now); called at decision ticks."""
        ...

    def wake_at(self, job: SimJob) -> float | None:
        """When a job that is still queued needs a decision though nothing else changed."""
        ...


def first_fit(free: list[int], per_pod: int, pods: int) -> list[int] | None:
    """The node of each pod, first fit, or None when they do not all fit."""
    left, out = list(free), []
    for _ in range(pods):
        for k, f in enumerate(left):
            if f >= per_pod:
                left[k] -= per_pod
                out.append(k)
                break
        else:
            return None
    return out


class _VirtualClock:
    """The World's virtual time as a Clock, for the offer back-off it shares with the service."""

    def __init__(self, world: World) -> None:
        self._world = world

    def now(self) -> datetime:
        return self._world.dt(self._world.now)


class World:
    """The simulated state: on-prem queues, pools, jobs, the event queue and the bill."""

    def __init__(
        self,
        jobs: Sequence[SimJob],
        onprem: Mapping[str, int],
        config: Config,
        catalog: Catalog,
        *,
        seed: int = 1,
        clouds: CloudModel = DEFAULT_CLOUDS,
    ) -> None:
        assert config.service is not None
        self.config, self.catalog, self.clouds = config, catalog, clouds
        self.service = config.service.spec
        self.rng = random.Random(seed)  # noqa: S311 (simulation, not security)
        self.tick = max(1, int(self.service.intervals.reconcile.total_seconds()))
        self.capacity = dict(onprem)
        self.free = dict(onprem)
        # Trace jobs ask for no GPU product: they queue for the largest one (as onprem.py assumes).
        self.product = max(sorted(onprem), key=lambda p: onprem[p])
        self.jobs = [Job(j) for j in sorted(jobs, key=lambda j: (j.submit, j.job_id))]
        self.queue: list[tuple[int, int]] = []  # heap of (submit, index): strict FIFO
        self.never_fits: set[int] = set()  # too big for on-prem: only a cloud can run them
        self.waiting: set[int] = set()  # every queued job (index order is submit order)
        self.running: dict[int, RunningWorkload] = {}  # on-prem, by job index
        self.pools: dict[str, Pool] = {}  # live ones, by name
        self.pool_list: list[Pool] = []  # every pool ever made, by id
        self.unavailable = UnavailableOffers(_VirtualClock(self))
        self.now = 0.0
        self._events: list[tuple[float, int, str, int | tuple[int, int]]] = []
        self._seq = 0
        self._ticks: set[int] = set()
        self._workloads: dict[int, Workload] = {}
        self.budgets = ledger.budget_limits(config)
        self.budget_used: dict[tuple[str, datetime], int] = {}  # USD micros per period
        self.budget_held: dict[int, int] = {}  # USD micros reserved per job in a cloud
        self._held: dict[str, int] = {}  # and per budget
        # the bill and the counts
        self.cost = self.overhead = self.idle = 0
        self.by_provider: dict[str, int] = {}
        self.pools_created = self.refusals = self.failures = self.interruptions = 0
        self.onprem_gpu_s = 0.0
        self.decisions = 0

    # -- time --

    def _at(self, when: float, kind: str, payload: int | tuple[int, int] = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, payload))

    def decide_at(self, when: float) -> None:
        """A decision tick at the first reconcile interval boundary at or after `when`."""
        tick = math.ceil(when / self.tick) * self.tick
        if tick not in self._ticks:
            self._ticks.add(tick)
            self._at(tick, "tick")

    def dt(self, t: float) -> datetime:
        return START + timedelta(seconds=t)

    def run(self, policy: Policy, progress: Callable[[float], None] | None = None) -> Outcome:
        """Replay every job to its end under `policy`; `progress` hears the share of arrivals."""
        for i, job in enumerate(self.jobs):
            self._at(job.spec.submit, "arrive", i)
        arrived, total = 0, len(self.jobs)
        while self._events:
            when, _, kind, payload = heapq.heappop(self._events)
            self.now = when
            if kind == "arrive":
                assert isinstance(payload, int)
                self._arrive(payload, policy)
                arrived += 1
                if progress and arrived % 1000 == 0:
                    progress(arrived / total)
            elif kind == "onprem-end":
                assert isinstance(payload, int)
                self._onprem_end(payload)
            elif kind == "cloud-end":
                assert isinstance(payload, tuple)
                self._cloud_end(*payload)
            elif kind == "nodes-ready":
                assert isinstance(payload, int)
                self._nodes_ready(self.pool_list[payload])
            elif kind == "launch-failed":
                assert isinstance(payload, int)
                self._launch_failed(self.pool_list[payload])
            elif kind == "wake":  # a policy's timer: worth a decision only if the job still waits
                assert isinstance(payload, int)
                if self.jobs[payload].state == "queued":
                    self.decide_at(when)
            elif kind == "idle-check":
                assert isinstance(payload, int)
                pool = self.pool_list[payload]
                if pool.state in ("requested", "ready") and pool.idle_since is not None:
                    self.decide_at(when)
            elif kind == "scale-down":
                assert isinstance(payload, tuple)
                self._scale_down(self.pool_list[payload[0]], payload[1])
            elif kind == "interrupt":
                assert isinstance(payload, tuple)
                self._interrupt(self.pool_list[payload[0]], payload[1])
            elif kind == "tick":
                self._ticks.discard(int(when))
                self._decide(policy)
        for pool in list(self.pools.values()):  # whatever is still up is let go at the end
            self._close(pool, "deleted")
        if progress:
            progress(1.0)
        return self._outcome(policy.name)

    # -- on-prem: strict FIFO, as onprem.py estimates --

    def _arrive(self, i: int, policy: Policy) -> None:
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

    # -- clouds --

    def _decide(self, policy: Policy) -> None:
        for _ in range(1 + CAPACITY_REPLANS):
            self.decisions += 1
            if not self._act(policy.decide(self)):
                return  # nothing refused for capacity: done until the next tick

    def _act(self, actions: Sequence[Action]) -> bool:
        """Carry the actions out; True when a cloud refused a pool for capacity."""
        refused = False
        for a in actions:
            if isinstance(a, CreatePool):
                refused |= not self._create(a)
            elif isinstance(a, ResizePool):
                pool = self.pools.get(a.pool)
                if pool is not None and pool.state in ("requested", "ready"):
                    self._resize(pool, a.nodes)
            elif isinstance(a, Dispatch):
                i = int(a.workload)
                pool = self.pools.get(a.pool)
                if pool is None or pool.state not in ("requested", "ready"):
                    continue  # its pool was refused: the next decision places it again
                if self.jobs[i].state == "queued":
                    self._plan(i, pool)
            elif isinstance(a, CancelDispatch):
                self._unplan(int(a.workload))
            elif isinstance(a, DeletePool):
                pool = self.pools.get(a.pool)
                if pool is not None:
                    self._close(pool, "deleted")
        return refused

    def _create(self, a: CreatePool) -> bool:
        offer = self.catalog.get(a.offer)
        assert offer is not None, a.offer
        if self.rng.random() < self.clouds.shortage:
            self.refusals += 1
            self.unavailable.mark(a.offer)
            return False
        self.pools_created += 1
        pool = Pool(
            len(self.pool_list), a.pool, a.target, a.policy, a.offer, offer.hourly.micros, self.now
        )
        self.pools[a.pool] = pool
        self.pool_list.append(pool)
        pool.doomed = self.rng.random() < self.clouds.launch_failure
        self._boot(pool, a.nodes)
        return True

    def _boot(self, pool: Pool, count: int) -> None:
        delay = self.clouds.latency[pool.offer.cloud].sample(self.rng)
        # A launch fails as a whole: nodes added while it launches share its fate, and nodes
        # added to a pool that is up come up.
        fails = pool.state == "requested" and pool.doomed
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
        if pool.state == "requested":
            pool.state = "ready"
            self.unavailable.succeeded(pool.offer)
        rate = self.clouds.spot_interruptions_per_hour
        if pool.offer.capacity == "spot" and rate > 0:
            for k, node in enumerate(pool.nodes):
                if node.ended is None and node.ready_at == self.now:
                    lost = self.now + self.rng.expovariate(rate) * 3600
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
        pool.idle_since = None
        if pool.state == "ready":
            self._start_planned(pool)

    def _unplan(self, i: int) -> None:
        job = self.jobs[i]
        pool = job.planned_pool
        if pool is not None:
            pool.planned.discard(i)
            job.planned_pool = None
            self._idle_if_empty(pool)

    def _start_planned(self, pool: Pool) -> None:
        for i in sorted(pool.planned, key=lambda i: (self.jobs[i].spec.submit, i)):
            job = self.jobs[i]
            spots = first_fit(pool.room(self.now), job.spec.gpus_per_pod, job.spec.pods)
            if spots is None:
                continue
            pool.planned.discard(i)
            job.planned_pool = None
            job.state, job.pool, job.nodes = "cloud", pool, spots
            self.waiting.discard(i)
            job.run_start = self.now
            if job.started is None:
                job.started = self.now
            for k in spots:
                pool.nodes[k].free -= job.spec.gpus_per_pod
                pool.nodes[k].jobs.add(i)
                pool.nodes[k].empty_since = None
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
        self._charge(i, pool)

    def _release(self, pool: Pool, i: int) -> None:
        job = self.jobs[i]
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
            self._idle_timer(pool)

    def _idle_timer(self, pool: Pool) -> None:
        policy = self.config.policies.get(pool.policy)
        ttl = policy.spec.teardown.idle_ttl if policy else timedelta(minutes=10)
        self._at(self.now + ttl.total_seconds(), "idle-check", pool.id)

    def _interrupt(self, pool: Pool, k: int) -> None:
        node = pool.nodes[k]
        if node.ended is None:
            self.interruptions += 1
            self._lose(pool, [node])
            self.decide_at(self.now)

    def _lose(self, pool: Pool, nodes: list[Node]) -> None:
        """Nodes go (interrupted, or their pool deleted): their jobs go back to the queue."""
        victims = sorted({i for n in nodes for i in n.jobs})
        for i in victims:
            self._release(pool, i)
            self._unhold(i, pool)
            self.jobs[i].restarts += 1
        for node in nodes:
            self._end_node(pool, node)
        for i in victims:  # back in their place in the queue; the policy decides again
            self._requeue(i)

    def _close(self, pool: Pool, state: str) -> None:
        for i in list(pool.planned):
            self._unplan(i)
        self._lose(pool, pool.nodes)
        pool.state = state
        if self.pools.get(pool.name) is pool:
            del self.pools[pool.name]

    def _end_node(self, pool: Pool, node: Node) -> None:
        if node.ended is not None:
            return
        node.ended = self.now
        pool.alive.remove(node)
        rule = BILLING[pool.offer.cloud]
        cost = pool.hourly_micros * rule.billable(node.ended - node.requested) // 3600
        booting = min(node.ready_at, node.ended) - node.requested
        overhead = min(cost, pool.hourly_micros * math.ceil(booting) // 3600)
        up_gpu_s = node.gpus * max(0.0, node.ended - node.ready_at)
        idle = pool.hourly_micros * max(0.0, up_gpu_s - node.used_gpu_s) / (3600 * node.gpus)
        self.cost += cost
        self.overhead += overhead
        self.idle += min(cost - overhead, int(idle))
        cloud = pool.offer.cloud
        self.by_provider[cloud] = self.by_provider.get(cloud, 0) + cost

    # -- money: usage, and budgets as the ledger keeps them --

    def _job_usage(self, i: int, pool: Pool) -> int:
        """USD micros of the pool's node-hours that this job's GPU-seconds account for."""
        s = self.jobs[i].spec
        return pool.hourly_micros * s.gpus * s.duration // (3600 * pool.offer.gpus)

    def _budgets_of(self, i: int, policy: str) -> list[ledger.BudgetLimit]:
        team = self.jobs[i].spec.team
        scopes = {("team", team), ("policy", policy), ("namespace", team)}
        return [b for b in self.budgets if (b.scope, b.value) in scopes]

    def _hold(self, i: int, pool: Pool) -> None:
        """Reserve the job's expected usage against its budgets while it runs (as the ledger does)."""
        micros = self._job_usage(i, pool)
        self.budget_held[i] = micros
        for b in self._budgets_of(i, pool.policy):
            self._held[b.name] = self._held.get(b.name, 0) + micros

    def _unhold(self, i: int, pool: Pool) -> None:
        micros = self.budget_held.pop(i, 0)
        for b in self._budgets_of(i, pool.policy):
            self._held[b.name] -= micros

    def _charge(self, i: int, pool: Pool) -> None:
        self._unhold(i, pool)
        used = self._job_usage(i, pool)
        now = self.dt(self.now)
        for b in self._budgets_of(i, pool.policy):
            key = (b.name, ledger.period_bounds(b.period, now)[0])
            self.budget_used[key] = self.budget_used.get(key, 0) + used

    def budget_views(self) -> tuple[BudgetView, ...]:
        now = self.dt(self.now)
        views = []
        for b in self.budgets:
            start = ledger.period_bounds(b.period, now)[0]
            usd = self.budget_used.get((b.name, start), 0) + self._held.get(b.name, 0)
            spent = Money(
                int(Decimal(usd) * usd_rate(self.config, b.amount.currency)), b.amount.currency
            )
            views.append(BudgetView(b.name, b.scope, b.value, b.amount - spent, b.hard))
        return tuple(views)

    # -- the decision's view --

    def workload(self, i: int) -> Workload:
        w = self._workloads.get(i)
        if w is None:
            s = self.jobs[i].spec
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
                burstable=True,
                deadline=self.dt(s.deadline),
                expected_runtime=timedelta(seconds=s.duration),
            )
            self._workloads[i] = w
        return w

    def pool_views(self) -> tuple[PoolView, ...]:
        views = []
        for pool in self.pools.values():
            free = [n.free for n in pool.alive]
            for i in pool.planned:  # planned work holds its room, as in the reconciler
                s = self.jobs[i].spec
                spots = first_fit(free, s.gpus_per_pod, s.pods)
                for k in spots or []:
                    free[k] -= s.gpus_per_pod
            views.append(
                PoolView(
                    name=pool.name,
                    target=pool.target,
                    policy=pool.policy,
                    offer=pool.offer,
                    nodes=len(free),
                    state="ready" if pool.state == "ready" else "creating",
                    created=self.dt(pool.created),
                    free_gpus=tuple(free),
                    idle_since=None if pool.idle_since is None else self.dt(pool.idle_since),
                    hourly=Money(pool.hourly_micros, "USD"),
                )
            )
        return tuple(views)

    # -- the figures --

    def _outcome(self, name: str) -> Outcome:
        jct: list[float] = []
        waits: list[float] = []
        met = unfinished = 0
        for job in self.jobs:
            if job.finished is None or job.started is None:
                unfinished += 1
                continue
            jct.append(job.finished - job.spec.submit)
            waits.append(job.started - job.spec.submit)
            met += job.finished <= job.spec.deadline
        span = max(j.finished or 0 for j in self.jobs) - min(j.spec.submit for j in self.jobs)
        capacity = sum(self.capacity.values())
        return Outcome(
            policy=name,
            jobs=len(self.jobs),
            cost_usd_micros=self.cost,
            overhead_usd_micros=self.overhead,
            idle_usd_micros=self.idle,
            by_provider=dict(sorted(self.by_provider.items())),
            pools_created=self.pools_created,
            deadlines_met=met / len(self.jobs),
            mean_jct_s=sum(jct) / len(jct) if jct else 0.0,
            p90_jct_s=_quantile(jct, 0.9),
            mean_queue_s=sum(waits) / len(waits) if waits else 0.0,
            p90_queue_s=_quantile(waits, 0.9),
            onprem_utilisation=self.onprem_gpu_s / (capacity * span) if span else 0.0,
            burst_jobs=sum(j.ran_in_cloud for j in self.jobs),
            unfinished=unfinished,
            capacity_refusals=self.refusals,
            launch_failures=self.failures,
            interruptions=self.interruptions,
            decisions=self.decisions,
        )


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Burst:
    """burst's own policy: the Snapshot the service would build, through `decide.plan`."""

    def __init__(self, config: Config, name: str = "burst") -> None:
        assert config.service is not None
        self.name, self.config = name, config
        self.max_wait = max(
            (
                p.spec.trigger.max_pending_wait
                for p in config.policies.values()
                if p.spec.trigger.max_pending_wait is not None
            ),
            default=None,
        )

    def wake_at(self, job: SimJob) -> float | None:
        return None if self.max_wait is None else job.submit + self.max_wait.total_seconds()

    def decide(self, world: World) -> Sequence[Action]:
        workloads = []
        for i in world.queued():
            w = world.workload(i)
            planned = world.jobs[i].planned_pool
            workloads.append(w if planned is None else replace(w, phase="planned"))
        now = world.dt(world.now)
        snapshot = Snapshot(
            taken_at=now,
            workloads=tuple(workloads),
            onprem=OnPrem(dict(world.capacity), tuple(world.running.values())),
            pools=world.pool_views(),
            budgets=world.budget_views(),
            unavailable=tuple(world.unavailable.current()),
        )
        return decide.plan(snapshot, world.catalog, self.config, now, skips=False).actions


def deadline_allowance(config: Config, policy: BurstPolicy) -> int:
    """Seconds past its runtime that even the shortest job gets before its deadline: the policy's
    safety margin plus twice the slowest target's provisioning estimate, so that a job that has to
    queue can still burst in time (trace.py's deadline rule)."""
    assert config.service is not None
    slowest = max(t.provisioning for t in config.service.spec.targets)
    return int((policy.spec.trigger.deadline_safety_margin + 2 * slowest).total_seconds())


def usd_rate(config: Config, currency: str) -> Decimal:
    """Units of `currency` per USD (catalog prices are USD)."""
    assert config.service is not None
    return Decimal(1) if currency == "USD" else config.service.spec.usd_exchange_rates[currency]


def price_cap_usd_micros(config: Config, policy: BurstPolicy) -> float | None:
    """The policy's max price per node-hour in USD micros, if it has one."""
    limits = policy.spec.limits
    if limits.max_hourly_price is None:
        return None
    money = Money.of(limits.max_hourly_price, limits.currency)
    return float(money.micros / usd_rate(config, limits.currency))


def target_regions(config: Config, names: Sequence[str]) -> dict[tuple[Cloud, str], str]:
    """The (cloud, region) of each named target, to the target's name."""
    assert config.service is not None
    targets = {t.name: t for t in config.service.spec.targets}
    return {(targets[n].cloud, targets[n].region): n for n in names}


def policy_of(config: Config, name: str | None = None) -> BurstPolicy:
    """The policy trace jobs fall under: `name`, else the first whose selector names namespaces
    and asks for no labels (trace jobs have none); the teams are mapped onto its namespaces."""
    if name is not None:
        if name not in config.policies:
            raise ValueError(f"no BurstPolicy {name!r} in the configuration")
        return config.policies[name]
    for _, p in sorted(config.policies.items()):
        s = p.spec.selector
        if s.namespaces and not s.match_labels and not s.match_expressions:
            return p
    raise ValueError("no BurstPolicy selects namespaces without labels; trace jobs carry none")
