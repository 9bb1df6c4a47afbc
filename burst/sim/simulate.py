"""The policy simulator: replay a job trace on virtual time through an on-prem cluster, a policy and
simulated clouds, and measure what it costs and how long jobs take.

`burst simulate` reads a trace (trace.py); `World.run(policy)` replays it here as a discrete-event
simulation, on the state of state.py, the on-prem queue of queue.py (strict FIFO per GPU product,
the queue decide/onprem.py estimates) and the clouds of clouds.py. A policy is asked what to do at
decision ticks, on the ServiceConfig's reconcile interval, after a change that can call for a
decision: a job that has to queue arrives, a job ends in a cloud while others wait (its room may
take one: at the pool cap it is the only room; for burst with exact runtimes on a strict queue,
only when its last plan left one wanting room, work on a pool late to launch, or the pool empty:
Plan.more_from), a launch fails, a node is lost, a pool has been idle for its TTL, or a timer the
policy asked for is due (jobs ending on-prem and nodes coming up do not: with exact runtimes they
only make estimates better). It sees the queue and the pools through views.py (the on-prem
cluster one object until a job starts or ends there), kept across decisions rather than rebuilt
for each, and answers with the actions of model.py: `Burst` builds the Snapshot the service
would and calls the same `decide.plan`; the baselines (baselines.py) answer with the same action
types. A launch refused for capacity backs its offer off and the policy is asked again at once,
as the reconcile loop does. Everything random comes from one seed.
A job runs for the trace's duration, as long in a cloud as on-prem; every policy is told the same
runtime for it (`--runtimes`: that duration, a user's guess, a learned estimate or the default).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import heapq
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Protocol

from burst import decide
from burst.amounts import Money
from burst.config import BurstPolicy, Config
from burst.model import (
    Action,
    CancelDispatch,
    Cloud,
    CreatePool,
    DeletePool,
    Dispatch,
    ResizePool,
    Snapshot,
)
from burst.sim.state import START, Outcome, usd_rate
from burst.sim.trace import SimJob
from burst.sim.views import Views

CAPACITY_REPLANS = 3
YOUNG_COLLECTION_THRESHOLD = 100_000  # allocations between collections of the youngest objects


class Policy(Protocol):
    name: str

    def decide(self, world: World) -> Sequence[Action]:
        """The actions to take now (world.now); called at decision ticks."""
        ...

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        """When a job that is still queued needs a decision though nothing else changed
        (`runtime`: the one the policies are told, in seconds)."""
        ...


@contextlib.contextmanager
def spaced_collections(young: int = YOUNG_COLLECTION_THRESHOLD) -> Iterator[None]:
    """Python's cyclic garbage collector run less often, for a replay. A plan holds thousands of
    small tuples alive at once (the waiting queue's estimates and places in line); at the default
    threshold of 700 allocations they were collected again and again, moved to the oldest
    generation, and swept there with the replay's millions of objects (a Philly replay with
    config/ spent about a tenth of its time in collections, 160 ms each full one). Garbage is
    still collected, later."""
    before = gc.get_threshold()
    gc.set_threshold(young, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


class World(Views):
    """The replay: events in time order, decisions at ticks, and the figures at the end."""

    def run(self, policy: Policy, progress: Callable[[float], None] | None = None) -> Outcome:
        """Replay every job to its end under `policy`; `progress` hears the share of arrivals."""
        with spaced_collections():
            return self._run(policy, progress)

    def _run(self, policy: Policy, progress: Callable[[float], None] | None) -> Outcome:
        # Jobs arrive in index order: each arrival is queued when the one before it is taken, so
        # that the event queue holds what is pending rather than the whole trace. Arrival i keeps
        # the sequence number i + 1, as if all had been queued first: ties break as they would.
        arrived, total = 0, len(self.jobs)
        self._seq = total
        # On-prem runs out of order for a policy that schedules it so (starburst), or for every
        # policy when the cluster's queueing is best-effort.
        self.out_of_order = getattr(policy, "out_of_order", False) or self.best_effort
        # Only burst's plan reads teardown.idleTtlChoice: a baseline keeps to the fixed TTL and
        # decides no more often for it.
        self.idle_checked_at_once = isinstance(policy, Burst)
        if total:
            heapq.heappush(self._events, (self.jobs[0].spec.submit, 1, "arrive", 0))
        while self._events:
            when, _, kind, payload = heapq.heappop(self._events)
            self.now = when
            if kind == "arrive":
                assert isinstance(payload, int)
                after = payload + 1
                if after < total:
                    submit = self.jobs[after].spec.submit
                    heapq.heappush(self._events, (submit, after + 1, "arrive", after))
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
                    self._idle_recheck(pool)
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

    def _decide(self, policy: Policy) -> None:
        for _ in range(1 + CAPACITY_REPLANS):
            self.decisions += 1
            refused = self._act(policy.decide(self))
            self.more_from = getattr(policy, "more_from", 0.0)
            if not refused:
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
                    self.sent.setdefault(pool.policy, collections.deque()).append(self.now)
            elif isinstance(a, CancelDispatch):
                planned = self.jobs[int(a.workload)].planned_pool
                if planned is not None and planned.name == a.pool:
                    self._unplan(int(a.workload))
            elif isinstance(a, DeletePool):
                pool = self.pools.get(a.pool)
                if pool is not None:
                    self._close(pool, "deleted")
        return refused

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
            idle_empty_usd_micros=self.idle_empty,
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
            job_usd_micros=dict(self.job_usage),
            # how much longer than told, in seconds and as a share; how long, as a share
            overrun_p90_s=self._against_told(lambda ran, told: float(max(0, ran - told)), 0.9),
            overrun_share_p90=self._against_told(lambda ran, told: max(0, ran - told) / told, 0.9),
            runtime_share_p10=self._against_told(lambda ran, told: ran / told, 0.1),
        )

    def _against_told(self, measure: Callable[[int, int], float], q: float) -> float | None:
        """The q-quantile, over the jobs told a runtime, of `measure`(how long each ran, what it
        was told); None when none was told one."""
        values = [
            measure(self.jobs[i].spec.duration, told)
            for i, told in self.told.items()
            if told is not None
        ]
        return _quantile(values, q) if values else None


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
        self.more_from: float | None = 0.0  # the last plan's Plan.more_from, in seconds
        self.max_wait = max(
            (
                p.spec.trigger.max_pending_wait
                for p in config.policies.values()
                if p.spec.trigger.max_pending_wait is not None
            ),
            default=None,
        )
        self.margin = max(
            (
                p.spec.trigger.deadline_safety_margin.total_seconds()
                for p in config.policies.values()
            ),
            default=0.0,
        )
        self.share = max(
            (p.spec.trigger.deadline_safety_share for p in config.policies.values()), default=0.0
        )
        self.counted = max(
            (p.spec.trigger.deadline_runtime_share for p in config.policies.values()), default=1.0
        )
        self.per_gpu_hour = min(
            (
                p.spec.trigger.wait_per_gpu_hour.total_seconds() / 3600
                for p in config.policies.values()
                if p.spec.trigger.wait_per_gpu_hour is not None
            ),
            default=None,
        )

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        """The service plans every pass; here, a decision is due when nothing else happens by the
        time a job still queued must burst: past the maximum wait or its wait per GPU-hour, or at
        the last moment its deadline trigger can fire (its deadline less the margin and its
        runtime, or the share of it the trigger counts). Without it, a quiet hour let such a job
        miss its deadline on-prem."""
        wakes = [job.deadline - self.margin - runtime * (self.counted + self.share)]
        if self.max_wait is not None:
            wakes.append(job.submit + self.max_wait.total_seconds())
        if self.per_gpu_hour is not None:
            wakes.append(job.submit + self.per_gpu_hour * job.gpus * runtime)
        return max(job.submit, min(wakes))

    def decide(self, world: World) -> Sequence[Action]:
        plan = decide.plan(
            self.snapshot(world), world.catalog, self.config, world.dt(world.now), skips=False
        )
        more = plan.more_from
        self.more_from = None if more is None else max(0.0, (more - START).total_seconds())
        return plan.actions

    def snapshot(self, world: World) -> Snapshot:
        """What the service's watch and ledger would show the plan now."""
        now = world.dt(world.now)
        return Snapshot(
            taken_at=now,
            workloads=world.queued_workloads(),
            onprem=world.onprem(),
            pools=world.pool_views(),
            budgets=world.budget_views(),
            unavailable=tuple(world.unavailable.current()),
            sent_last_hour=world.sent_last_hour(),
        )


def price_cap_usd_micros(config: Config, policy: BurstPolicy) -> float | None:
    """The policy's max price per node-hour in USD micros, if it has one."""
    return _usd_micros(config, policy, policy.spec.limits.max_hourly_price)


def job_cap_usd_micros(config: Config, policy: BurstPolicy) -> float | None:
    """The policy's max cost per job in USD micros, if it has one."""
    return _usd_micros(config, policy, policy.spec.limits.max_cost_per_job)


def _usd_micros(config: Config, policy: BurstPolicy, amount: Decimal | None) -> float | None:
    if amount is None:
        return None
    currency = policy.spec.limits.currency
    return float(Money.of(amount, currency).micros / usd_rate(config, currency))


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
