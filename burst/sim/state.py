"""The simulator's state: jobs, nodes and pools as the replay keeps them, the virtual clock and its
event queue, and the money side (each job's usage held against its budgets while it runs and charged
when it ends, as the ledger does). queue.py (on-prem) and clouds.py build on it and mark what they
change, views.py shows it to the policies; simulate.py's World runs the replay."""

from __future__ import annotations

import collections
import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal

from burst.amounts import Money
from burst.cloud.catalog import Catalog, UnavailableOffers
from burst.config import Config
from burst.decide.cluster import Nodes, largest_product
from burst.decide.planner import claimant
from burst.decide.sharing import sharing_policies
from burst.model import (
    BudgetView,
    Cloud,
    OfferKey,
    OnPrem,
    OnPremNode,
    PoolView,
    RunningWorkload,
    Workload,
)
from burst.money import ledger
from burst.runtimes import Learned
from burst.sim.trace import NODE_GPUS, SimJob, products_asked
from providers.sim import LATENCY, Latency

START = datetime(2026, 1, 5, tzinfo=UTC)  # virtual time 0, a Monday: budget weeks line up


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
    # Whether burst's targets are told these clouds as they are (variants.stated): a target's
    # estimates are written for real clouds, and the ideal clouds have no launch time or reclaim
    # that any configuration could state (a provisioningEstimate of 0s is refused).
    restate_targets: bool = False


DEFAULT_CLOUDS = CloudModel()
RuntimeMode = Literal["exact", "noisy", "learned", "none"]
# Declared runtimes are off by a factor of e^0.5 = 1.6 either way about a third of the time.
NOISE_SIGMA = 0.5
# Clouds that launch at once, never refuse, fail or reclaim: as the clouds of Starburst's simulator
# (ATC'24) are, for a comparison on its terms (`burst simulate --clouds ideal`).
IDEAL_CLOUDS = CloudModel(
    shortage=0.0,
    launch_failure=0.0,
    spot_interruptions_per_hour=0.0,
    latency={cloud: Latency(median_s=0.0, sigma=0.0, cap_s=0.0) for cloud in LATENCY},
    restate_targets=True,
)
CLOUD_MODELS = {"realistic": DEFAULT_CLOUDS, "ideal": IDEAL_CLOUDS}


@dataclass
class Job:
    spec: SimJob
    # queued, remote (its copy waits on a pool that is up), onprem, cloud, done
    state: str = "queued"
    started: float | None = None
    finished: float | None = None
    planned_pool: Pool | None = None
    pool: Pool | None = None
    nodes: list[int] = field(default_factory=list)  # the pool's nodes its pods run on
    run_start: float = 0.0  # of its current run in a cloud
    told_end: float = 0.0  # when that run ends by the runtime the decision is told (views.py)
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
    empty_s: float = 0.0  # up and running nothing, before empty_since
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
    closed: float | None = None  # when it was deleted or failed

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
    # Of the idle, what whole nodes running nothing cost (booted for work not started yet, left
    # for a pool's TTL or the autoscaler); the rest is GPUs free beside work on a node.
    idle_empty_usd_micros: int
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
    # USD micros of node-hours each job that ran in a cloud accounts for, by job id (windows.py)
    job_usd_micros: dict[str, int] = field(default_factory=dict)
    # How far runtimes outran what the decision was told: the 90th percentile, over the jobs
    # told one, of how much longer each ran (0 for those that ran no longer); None: none was told.
    overrun_p90_s: float | None = None
    overrun_share_p90: float | None = None  # the same, each as a share of the runtime told
    # The share of its runtime told that nine jobs in ten ran at least (the 10th percentile).
    runtime_share_p10: float | None = None


def usd_rate(config: Config, currency: str) -> Decimal:
    """Units of `currency` per USD (catalog prices are USD)."""
    assert config.service is not None
    return Decimal(1) if currency == "USD" else config.service.spec.usd_rates()[currency]


class _VirtualClock:
    """The World's virtual time as a Clock, for the offer back-off it shares with the service."""

    def __init__(self, world: WorldState) -> None:
        self._world = world

    def now(self) -> datetime:
        return self._world.dt(self._world.now)


def told_runtime(world: WorldState, i: int) -> int | None:
    """The runtime the decision is told for job i (None: the policy's default), fixed when it is
    first asked (a learned one, at the job's first decision)."""
    if i not in world.told:
        spec = world.jobs[i].spec
        if world.runtimes == "exact":
            told: int | None = spec.duration
        elif world.runtimes == "noisy":
            told = world.guessed[i]
        elif world.runtimes == "learned":
            allowed = timedelta(seconds=spec.deadline - spec.submit)
            found = world.learned.estimate(spec.team, spec.job_id, spec.gpus, allowed=allowed)
            told = None if found is None else int(found[0].total_seconds())
            longest = world.learned.longest(spec.team, spec.job_id, spec.gpus)
            if longest is not None:
                world.longest[i] = longest
        else:
            told = None
        world.told[i] = told
    return world.told[i]


def runtime_told(world: WorldState, i: int) -> int:
    """The runtime the policies go by for job i: the one they are told, else the default."""
    told = told_runtime(world, i)
    return world.default_runtime if told is None else told


class WorldState:
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
        runtimes: RuntimeMode = "exact",
    ) -> None:
        assert config.service is not None
        self.config, self.catalog, self.clouds = config, catalog, clouds
        self.service = config.service.spec
        self.seed = seed
        # Draws made so far this minute, per kind and offer (draw()): the clock only moves on.
        self._draws: dict[tuple[str, OfferKey], int] = {}
        self._draws_minute = -1
        self.tick = max(1, int(self.service.intervals.reconcile.total_seconds()))
        self.capacity = dict(onprem)
        # Each product's nodes of NODE_GPUS GPUs (the last one smaller if they do not divide):
        # a pod needs its GPUs on one node, as the cluster's scheduler places it.
        self.clusters: dict[str, Nodes] = {}
        nodes: list[OnPremNode] = []
        for product, gpus in sorted(onprem.items()):
            whole, rest = divmod(gpus, NODE_GPUS)
            sizes = [NODE_GPUS] * whole + ([rest] if rest else [])
            names = [f"onprem-{product.lower()}-{k:04d}" for k in range(len(sizes))]
            self.clusters[product] = Nodes(names, sizes)
            nodes += [OnPremNode(n, product, g) for n, g in zip(names, sizes, strict=True)]
        self.onprem_nodes = tuple(nodes)
        self.jobs = [Job(j) for j in sorted(jobs, key=lambda j: (j.submit, j.job_id))]
        # The product each job asks for (trace.py's rule; None: any, and it queues for the
        # largest product, as decide/onprem.py assumes) and the one it queues for.
        self.asks = products_asked([j.spec for j in self.jobs], onprem, seed)
        largest = largest_product(onprem)
        assert largest is not None, "an on-prem cluster has a GPU product"
        self.product_of = [a or largest for a in self.asks]
        # heaps of (submit, index) per product: strict FIFO
        self.queues: dict[str, list[tuple[int, int]]] = {p: [] for p in onprem}
        self.never_fits: set[int] = set()  # too big for on-prem: only a cloud can run them
        self.waiting: set[int] = set()  # every queued job (index order is submit order)
        # ... and the same jobs kept sorted as they come and go (queue.py), so that a decision
        # reads the queue in order without sorting it: those that fit on-prem, then the rest.
        self.waiting_fits: list[int] = []
        self.waiting_big: list[int] = []
        # ... those that fit on-prem again, by product and pod shape, for first fit (queue.py)
        self.fit_lines: dict[tuple[str, int, int], list[int]] = {}
        # On-prem first fit in queue order (queue.py): the cluster's queueing, or a policy's choice
        self.best_effort = self.service.on_prem.queueing == "BestEffortFIFO"
        self.out_of_order = self.best_effort
        self.idle_checked_at_once = False  # a pool gone idle is a decision (simulate.py)
        # on-prem, by job index: its pods as the decision sees them, and the node of each
        self.running: dict[int, tuple[RunningWorkload, ...]] = {}
        self.onprem_kept: OnPrem | None = None  # the decision's view of it (views.py)
        self.placed: dict[int, list[int]] = {}
        self.pools: dict[str, Pool] = {}  # live ones, by name
        self.pool_list: list[Pool] = []  # every pool ever made, by id
        # The decision's view of each live pool, in the order of `pools` (views.py builds them):
        # None until built, and rebuilt only for the pools in `stale`, those opened, changed or
        # gone since the last decision.
        self.views: dict[str, PoolView | None] = {}
        self.stale: set[Pool] = set()
        self.view_list: tuple[PoolView, ...] = ()
        # A live name's place in `pools` (a name taken again while live keeps its place), to give
        # the pools with room and the idle ones in that order without going through all of them.
        self.rank: dict[str, int] = {}
        self.roomy: dict[str, PoolView] = {}  # the views with a GPU free
        self.idling: dict[str, Pool] = {}  # the pools running nothing, with nothing planned
        # The pools whose views move with the clock, and from when (views.py moves_from), and
        # when the views were last brought up to date.
        self.moving: dict[str, tuple[Pool, float]] = {}
        self.viewed_at = 0.0
        self.unavailable = UnavailableOffers(_VirtualClock(self))
        # When each policy sent a job to a cloud, the last hour of it (views.py sent_last_hour).
        self.sent: dict[str, collections.deque[float]] = {}
        self.now = 0.0
        self._events: list[tuple[float, int, str, int | tuple[int, int]]] = []
        self._seq = 0
        self._ticks: set[int] = set()
        self.workloads: dict[int, Workload] = {}  # each job as pending (views.py)
        # Each queued job as the decision sees it, pending or planned: made when first asked,
        # dropped when the job is planned, unplanned or leaves the queue.
        self.queued_as: dict[int, Workload] = {}
        self.budgets = ledger.budget_limits(config)
        # The policies that share their pools (placement.sharePools).
        self.sharing = sharing_policies(config)
        # A trace job's policy, by its team (its namespace; trace jobs carry no labels), as the
        # decision claims it: the first by name whose selector does.
        by_name = [config.policies[n] for n in sorted(config.policies)]
        self.policy_of_team = {
            team: policy.metadata.name if (policy := claimant(by_name, team, {})) else ""
            for team in {j.team for j in jobs}
        }
        self.budget_used: dict[tuple[str, datetime], int] = {}  # USD micros per period
        self.budget_held: dict[int, int] = {}  # USD micros reserved per job in a cloud
        self._held: dict[str, int] = {}  # and per budget
        # the bill and the counts
        self.cost = self.overhead = self.idle = self.idle_empty = 0
        self.job_usage: dict[str, int] = {}  # USD micros per job id that ran in a cloud
        self.by_provider: dict[str, int] = {}
        self.pools_created = self.refusals = self.failures = self.interruptions = 0
        self.onprem_gpu_s = 0.0
        # What the decision is told of each job's runtime (views.py): exactly its duration, a
        # user's guess (the duration times a log-normal error), nothing but what finished jobs
        # taught (burst/runtimes.py), or nothing (the policy's default). Its own random stream,
        # so that the clouds' draws stay those of the other modes.
        self.runtimes: RuntimeMode = runtimes
        self.learned = Learned()
        self.default_runtime = max(
            (
                int(p.spec.defaults.expected_runtime.total_seconds())
                for p in config.policies.values()
            ),
            default=3600,
        )
        guesses = random.Random(f"runtimes-{seed}")  # noqa: S311 (simulation, not security)
        self.guessed = [  # drawn in job order, whatever order the decisions ask in
            max(1, round(j.spec.duration * math.exp(guesses.gauss(0.0, NOISE_SIGMA))))
            for j in (self.jobs if runtimes == "noisy" else ())
        ]
        self.told: dict[int, int | None] = {}  # job -> the runtime the decision was told
        self.longest: dict[int, timedelta] = {}  # job -> the longest run its learned estimate is of
        self.decisions = 0
        # From when a decision may do more than the last on room freed alone (Plan.more_from, in
        # seconds; 0, from the start, for a policy that does not say; None: never).
        self.more_from: float | None = 0.0

    # -- time --

    def _at(self, when: float, kind: str, payload: int | tuple[int, int] = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, payload))

    def draw(self, kind: str, offer: OfferKey) -> random.Random:
        """The random source of one draw of the clouds' `kind` (a refusal, a failed launch, a
        launch's latency, a spot node's life) for `offer` now: seeded by the replay's seed, the
        kind, the offer, the minute and how many such draws this minute saw before, rather than
        taken in turn from one stream. So every policy replayed on a seed meets the same clouds:
        a launch asked at the same minute draws the same fate whatever the policy did before
        (common random numbers). From one stream, one launch more or less early on shifted every
        later draw, and two settings of the same policy differed by several percent on a seed
        where the clouds alone set them apart."""
        minute = int(self.now // 60)
        if minute != self._draws_minute:
            self._draws, self._draws_minute = {}, minute
        key = (kind, offer)
        n = self._draws[key] = self._draws.get(key, -1) + 1
        return random.Random(f"{self.seed}/{kind}/{offer}/{minute}/{n}")  # noqa: S311 (simulation)

    def decide_at(self, when: float) -> None:
        """A decision tick at the first reconcile interval boundary at or after `when`."""
        tick = math.ceil(when / self.tick) * self.tick
        if tick not in self._ticks:
            self._ticks.add(tick)
            self._at(tick, "tick")

    def dt(self, t: float) -> datetime:
        return START + timedelta(seconds=t)

    # -- money: usage, and budgets as the ledger keeps them --

    def _job_usage(self, i: int, pool: Pool) -> int:
        """USD micros of the pool's node-hours that this job's GPU-seconds account for."""
        s = self.jobs[i].spec
        return pool.hourly_micros * s.gpus * s.duration // (3600 * pool.offer.gpus)

    def sends(self, policy: str) -> Sequence[float]:
        """When the sends that count for an idle pool of `policy` were made (the last hour's, in
        time order): its own, or those of every policy sharing pools where it does, as the
        decision counts them (decide/existing.py)."""
        if policy not in self.sharing:
            return self.sent.get(policy, ())
        return sorted(t for name in self.sharing for t in self.sent.get(name, ()))

    def _budgets_of(self, i: int) -> list[ledger.BudgetLimit]:
        """The budgets over job i: its team's, its namespace's and its own policy's, whatever
        policy's pool it runs on (placement.sharePools), as the ledger spends a run."""
        team = self.jobs[i].spec.team
        scopes = {("team", team), ("policy", self.policy_of_team[team]), ("namespace", team)}
        return [b for b in self.budgets if (b.scope, b.value) in scopes]

    def _hold(self, i: int, pool: Pool) -> None:
        """Reserve the job's expected usage against its budgets while it runs (as the ledger does)."""
        micros = self._job_usage(i, pool)
        self.budget_held[i] = micros
        for b in self._budgets_of(i):
            self._held[b.name] = self._held.get(b.name, 0) + micros

    def _unhold(self, i: int, pool: Pool) -> None:
        micros = self.budget_held.pop(i, 0)
        for b in self._budgets_of(i):
            self._held[b.name] -= micros

    def _charge(self, i: int, pool: Pool) -> None:
        self._unhold(i, pool)
        used = self._job_usage(i, pool)
        job_id = self.jobs[i].spec.job_id
        self.job_usage[job_id] = self.job_usage.get(job_id, 0) + used
        now = self.dt(self.now)
        for b in self._budgets_of(i):
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

    def _unplan(self, i: int) -> None:
        """A job planned onto a pool is no longer (clouds.py)."""
        raise NotImplementedError

    # -- the pools the decision sees --

    def _open(self, pool: Pool) -> None:
        """A new live pool; its view takes the place its name takes in `pools`."""
        self.rank.setdefault(pool.name, pool.id)
        self.pools[pool.name] = pool
        self.pool_list.append(pool)
        self.views[pool.name] = None
        self.stale.add(pool)

    def _changed(self, pool: Pool) -> None:
        """Something the pool's view shows has changed: nodes, room, planned jobs, state, idleness."""
        self.stale.add(pool)

    def _gone(self, pool: Pool) -> None:
        """The pool is deleted or failed: it leaves `pools` and the views."""
        if self.pools.get(pool.name) is pool:
            del self.pools[pool.name]
            del self.views[pool.name]
            del self.rank[pool.name]
        self.stale.add(pool)
