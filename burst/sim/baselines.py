"""The policies a platform would otherwise pick, for `burst simulate --baselines` to compare burst
with, on the same trace, seed and simulated clouds (simulate.py):

- `never`: never burst; everything waits for on-prem.
- `no-wait`: a job that cannot start on-prem at once bursts to the cheapest on-demand offer.
- `constant-wait`: a job still queued after a fixed wait bursts to the cheapest on-demand offer of
  the policy's targets, as the cluster autoscaler with `--new-pod-scale-up-delay` behaves.
- `compute-wait`: Starburst's waiting policy (Cao et al., USENIX ATC '24): a job waits for on-prem
  for `k x GPUs x runtime`, by the runtime every policy is told (exact, a user's guess, learned
  or the default: `--runtimes`); `k` is set from a waiting budget, here so that the allowed
  waits of the trace's true runtimes average the budget.
- `starburst`: compute-wait as Starburst runs it, controlling the on-prem scheduler too: on-prem
  runs queued jobs out of order (each, in queue order, starts if its GPUs are free: a small job
  runs past a big one that does not fit), and a job queued behind 30 others or more bursts at
  once. A stronger baseline than compute-wait on the cluster's strict FIFO queue, which
  burst and the others are replayed on.

None of them knows deadlines. They use the offers the burst policy may use (its targets, GPUs and
price cap) under its limits as burst is: at most `maxPools` pools of at most `maxNodesPerPool`
nodes, no job over `maxCostPerJob`, and for a pool past `maxLifetime` only work that ends before
its own, as burst's. They reuse a pool of the same offer that has room (failing that, one past
its lifetime whose work ends after the job would), open a pool while under the pool cap, and at
the cap take room in or grow a pool of any offer that suits the job, cheapest first, as the
cluster autoscaler's price expander grows a node group up to its maximum size, and failing that
grow one past its lifetime whose work ends after the job would; a job no pool can take waits for
the next decision. They let a pool go once it has been idle for the policy's idle
TTL, or is idle past its lifetime. Budgets bind burst alone: they count reservations and charges
in the service's ledger, which a baseline has not. They answer with the actions decide.plan
would, so the simulator carries them out the same way.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from burst.amounts import Money
from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, Config
from burst.decide import allowed_accelerators
from burst.decide.pools import first_fit
from burst.model import Action, CreatePool, DeletePool, Dispatch, Offer, OfferKey, ResizePool
from burst.sim.simulate import World, job_cap_usd_micros, price_cap_usd_micros, target_regions
from burst.sim.state import runtime_told
from burst.sim.trace import SimJob

DEFAULT_WAIT = timedelta(minutes=30)
STARBURST_QUEUE_CAP = 30  # queued jobs; past it, a job bursts at once


# Pools past their lifetime that run work, by offer: GPUs free per node, when their work ends.
Late = dict[OfferKey, dict[str, tuple[list[int], float]]]


@dataclass(frozen=True)
class _Choice:
    offer: Offer
    target: str
    nodes: int


class Never:
    name = "never"

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        return None

    def decide(self, world: World) -> Sequence[Action]:
        return ()


class Waiting:
    """Burst a queued job once it has waited `wait(job, runtime)` seconds (`runtime`: the one every
    policy is told, `--runtimes`), to the cheapest on-demand offer."""

    def __init__(
        self,
        name: str,
        config: Config,
        policy: BurstPolicy,
        catalog: Catalog,
        wait: Callable[[SimJob, int], float],
        *,
        out_of_order: bool = False,
        queue_cap: int | None = None,
    ) -> None:
        self.name, self.policy, self.wait = name, policy, wait
        self.out_of_order, self.queue_cap = out_of_order, queue_cap
        # Every target of the policy, as burst may use, under the policy's caps.
        self._targets = target_regions(config, policy.spec.placement.targets)
        self._catalog, self._cap = catalog, price_cap_usd_micros(config, policy)
        limits = policy.spec.limits
        self._max_pools, self._max_nodes = limits.max_pools, limits.max_nodes_per_pool
        self._max_job = job_cap_usd_micros(config, policy)
        self._by_shape: dict[tuple[int, int, str | None], tuple[list[_Choice], list[int]]] = {}
        self._ttl = policy.spec.teardown.idle_ttl.total_seconds()
        self._lifetime = policy.spec.teardown.max_lifetime.total_seconds()
        self._made = self._pools = 0
        # Per job of the replay being decided: its submit time, how long it may wait, how many of
        # its offers are within the per-job cost cap, the runtime told and its pod shape. All are
        # fixed once the job has arrived (the runtime told is fixed then), and were worked out
        # again for every waiting job on every decision.
        self._world: World | None = None
        self._waits: dict[int, tuple[float, float, int, int, tuple[int, int, str | None]]] = {}
        # Within a decision, by choice (an offer for a pod shape, kept for the replay): its
        # offer's pools, and those past their lifetime; none with room for it, until a pool opens
        # or grows (room otherwise only shrinks); none with nodes left for it at the pool cap
        # (nodes only grow). Under config/'s caps thousands waiting were walked through the same
        # full pools on every decision.
        self._rooms: dict[
            int,
            tuple[dict[str, list[int]], dict[str, int], dict[str, tuple[list[int], float]] | None],
        ] = {}
        self._no_fit: set[int] = set()
        self._no_growth: set[int] = set()
        # At the pool cap, within a decision: the offers that have a pool (no other can take a
        # job then), and by pod shape and offers within the job's cost cap, those of its choices
        # (Philly's one-GPU jobs have 134, and most have no pool under config/'s four).
        self._pooled: set[OfferKey] = set()
        self._usable: dict[tuple[tuple[int, int, str | None], int], list[_Choice]] = {}

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        return job.submit + self.wait(job, runtime)

    def _choices(self, job: SimJob, asks: str | None) -> tuple[list[_Choice], list[int]]:
        """The on-demand nodes for the job's pods, cheapest first, of every offer of a GPU the
        policy allows for the product it asks for, and what each costs an hour (cached per pod
        shape and product)."""
        shape = (job.gpus_per_pod, job.pods, asks)
        if shape not in self._by_shape:
            choices: list[_Choice] = []
            offers = self._catalog.query(
                allowed_accelerators(self.policy, asks, self._catalog),
                capacity="on-demand",
                regions=set(self._targets),
            )
            for o in offers:
                if self._cap is not None and o.hourly.micros > self._cap:
                    continue
                per_node = o.gpus // job.gpus_per_pod
                if per_node == 0:
                    continue
                nodes = math.ceil(job.pods / per_node)
                if nodes <= self._max_nodes:
                    choices.append(_Choice(o, self._targets[(o.cloud, o.region)], nodes))
            choices.sort(key=lambda c: c.nodes * c.offer.hourly.micros)
            self._by_shape[shape] = (choices, [c.nodes * c.offer.hourly.micros for c in choices])
        return self._by_shape[shape]

    def decide(self, world: World) -> Sequence[Action]:
        actions: list[Action] = []
        # A pool past the policy's max lifetime takes only work that ends before its own, and goes
        # once idle, as burst's (decide/existing.py); it counts against the pool cap while it runs.
        born = world.now - self._lifetime
        for p in world.idle_pools():
            if p.state not in ("requested", "ready") or p.idle_since is None:
                continue
            if world.now - p.idle_since >= self._ttl:
                actions.append(DeletePool(p.name, "idle for the idle TTL"))
            elif p.created <= born:
                actions.append(DeletePool(p.name, "max lifetime reached, and nothing runs on it"))
        gone = {a.pool for a in actions}
        self._pools = len(world.pools) - len(gone)
        room, sizes, late = _pools_by_offer(world, gone, born)
        late_room = any(
            max(free, default=0) or len(free) < self._max_nodes
            for pools in late.values()
            for free, _ in pools.values()
        )
        if not room and self._pools >= self._max_pools and self._full(sizes) and not late_room:
            # No pool has a GPU free, none may be opened and none may grow: every waiting job
            # would be refused (a replay under config/'s caps decides so for hours at a time,
            # over thousands waiting).
            return actions
        if world is not self._world:
            self._world, self._waits = world, {}
        self._rooms, self._no_fit, self._no_growth = {}, set(), set()
        self._pooled, self._usable = set(sizes) | set(late), {}
        waits = self._waits
        # At the pool cap, the most offers (cheapest first) a pod shape has found no pool among:
        # one of that shape with as many or fewer finds none either, until a pool grows (the
        # new nodes may have GPUs left over; otherwise room only shrinks within a decision).
        # With pools past their lifetime, a job that runs no shorter is refused too.
        refused: dict[tuple[int, int, str | None], tuple[int, int]] = {}
        for place, i in enumerate(world.queued()):
            job = world.jobs[i]
            known = waits.get(i)
            if known is None:
                spec, told = job.spec, runtime_told(world, i)
                shape = (spec.gpus_per_pod, spec.pods, world.asks[i])
                known = waits[i] = (
                    spec.submit,
                    self.wait(spec, told),
                    self._within(i, world),
                    told,
                    shape,
                )
            submit, wait, within, told, shape = known
            capped = self.queue_cap is not None and place >= self.queue_cap
            if job.planned_pool is not None or not (world.now - submit >= wait or capped):
                continue
            before = refused.get(shape)
            if before is not None and within <= before[0] and told >= before[1]:
                continue
            spec = job.spec
            choices = self._choices(spec, world.asks[i])[0][:within]
            if self._pools >= self._max_pools:
                usable = self._usable.get((shape, within))
                if usable is None:
                    usable = [c for c in choices if c.offer.key in self._pooled]
                    self._usable[(shape, within)] = usable
            else:
                usable = choices
            # The cheapest offer: a pool of it with room, else a new one while under the pool
            # cap; at the cap, each offer in turn, cheapest first: a pool of it with room, or
            # one that can grow (the autoscaler's price expander over its node groups).
            ends = world.now + told
            for k, choice in enumerate(usable):
                asked = len(actions)
                found = self._pool(choice, spec, room, sizes, late, actions, ends, new=k == 0)
                if found is not None:
                    if len(actions) > asked and isinstance(actions[-1], ResizePool):
                        refused.clear()
                    actions.append(
                        Dispatch(
                            str(i),
                            found,
                            choice.target,
                            "waited long enough",
                            Money.zero("USD"),
                            world.dt(world.now + spec.duration),
                        )
                    )
                    break
            else:
                now_refused = (len(choices), told if late else 0)
                if before is None or (now_refused[0] >= before[0] and now_refused[1] <= before[1]):
                    refused[shape] = now_refused
        return actions

    def _within(self, i: int, world: World) -> int:
        """How many of job i's offers, the cheapest first, are within the per-job cost cap."""
        spec = world.jobs[i].spec
        every, hourly = self._choices(spec, world.asks[i])
        if self._max_job is None:
            return len(every)
        most = self._max_job * 3600
        return bisect.bisect_left(hourly, True, key=lambda h: h * spec.duration > most)

    def _full(self, sizes: dict[OfferKey, dict[str, int]]) -> bool:
        """Whether no pool that takes work may grow by a node."""
        return all(n >= self._max_nodes for pools in sizes.values() for n in pools.values())

    def _pool(
        self,
        choice: _Choice,
        spec: SimJob,
        room: dict[OfferKey, dict[str, list[int]]],
        sizes: dict[OfferKey, dict[str, int]],
        late: Late,
        actions: list[Action],
        ends: float,
        *,
        new: bool,
    ) -> str | None:
        """A pool of the choice's offer for the job, with its pods' GPUs taken from its room: one
        with room now, else (`new`) a new pool under the pool cap, else one grown within the
        node cap, else one past its lifetime whose work ends after `ends` (the job's expected end)
        as it is or grown; None when the caps leave none."""
        offer, mine = choice.offer, id(choice)  # a choice is one offer for one pod shape
        known = self._rooms.get(mine)
        if known is None:  # an offer's key made and hashed once a decision, not once a job
            key = offer.key
            known = self._rooms[mine] = (
                room.setdefault(key, {}),
                sizes.setdefault(key, {}),
                late.get(key),
            )
        same, nodes, lapsed = known
        pool = None
        if mine not in self._no_fit:
            pool = _with_room(same, spec.gpus_per_pod, spec.pods)
            if pool is None:
                self._no_fit.add(mine)
        if pool is None and lapsed and self._pools < self._max_pools:
            # Below the cap, a pool past its lifetime takes the job in its room alone, as
            # burst's does (decide/reuse.py, best_drained).
            pool = _late_pool(choice, spec, lapsed, actions, ends, 0)
            if pool is not None:
                return pool
        if pool is None and new and self._pools < self._max_pools:
            self._pools += 1
            self._made += 1
            pool = f"{self.name}-{self._made}"
            actions.append(
                CreatePool(
                    pool,
                    choice.target,
                    self.policy.metadata.name,
                    offer.key,
                    choice.nodes,
                    offer.hourly,
                    "waited long enough",
                    _cost(choice, spec),
                )
            )
            same[pool], nodes[pool] = [offer.gpus] * choice.nodes, choice.nodes
            self._no_fit.clear()
            self._pooled.add(offer.key)
        elif pool is None and self._pools >= self._max_pools:
            if mine not in self._no_growth:
                limit = self._max_nodes - choice.nodes
                pool = next((n for n, k in nodes.items() if k <= limit), None)
            if pool is None:
                self._no_growth.add(mine)
                if lapsed is None:
                    return None
                return _late_pool(choice, spec, lapsed, actions, ends, self._max_nodes)
            nodes[pool] += choice.nodes
            self._no_fit.clear()
            actions.append(ResizePool(pool, nodes[pool], "waited long enough", _cost(choice, spec)))
            same.setdefault(pool, []).extend([offer.gpus] * choice.nodes)
        if pool is None:
            return None
        for k in first_fit(same[pool], spec.gpus_per_pod, spec.pods) or []:
            same[pool][k] -= spec.gpus_per_pod
        return pool


def _pools_by_offer(
    world: World, gone: set[str], born: float
) -> tuple[dict[OfferKey, dict[str, list[int]]], dict[OfferKey, dict[str, int]], Late]:
    """The pools a waiting baseline may use now, by offer, but those `gone` (deleted by this
    decision): the GPUs free per node of each that takes work and has any (a pool with none can
    take no job: every pod asks for a GPU or more); the nodes of each that takes work, for the
    growth the pool cap leaves; and those past their lifetime (created at `born` or before) with
    work, its end and their room: at the cap such a pool takes a job that ends before its work
    does, as burst's (decide/reuse.py, best_at_pool_limit)."""
    draining = gone | {name for name, p in world.pools.items() if p.created <= born}
    room: dict[OfferKey, dict[str, list[int]]] = {}
    for v in world.pools_with_room():
        if v.name not in draining:
            room.setdefault(v.offer, {})[v.name] = v.free_per_node()
    sizes: dict[OfferKey, dict[str, int]] = {}
    for name, p in world.pools.items():
        if name not in draining:
            sizes.setdefault(p.offer, {})[name] = len(p.alive)
    late: Late = {}
    for v in world.pool_views():
        if v.name in draining and v.name not in gone:
            work_ends = [b for b in v.busy_until if b is not None]
            if work_ends:
                until = (max(work_ends) - world.dt(0)).total_seconds()
                late.setdefault(v.offer, {})[v.name] = (v.free_per_node(), until)
    return room, sizes, late


def _cost(choice: _Choice, spec: SimJob) -> Money:
    """What the choice's nodes cost for the job's run: asked only of a pool made or grown."""
    return Money(choice.offer.hourly.micros * choice.nodes * spec.duration // 3600, "USD")


def _late_pool(
    choice: _Choice,
    spec: SimJob,
    lapsed: dict[str, tuple[list[int], float]],
    actions: list[Action],
    ends: float,
    max_nodes: int,
) -> str | None:
    """One of `lapsed` (the pools of the choice's offer past their lifetime), with work that
    ends after `ends`, that holds the job as it is or grown to at most `max_nodes` (0: as it
    is); its room taken."""
    offer = choice.offer
    for name, (free, until) in lapsed.items():
        if ends > until:
            continue
        if first_fit(free, spec.gpus_per_pod, spec.pods) is None:
            if len(free) + choice.nodes > max_nodes:
                continue
            free.extend([offer.gpus] * choice.nodes)
            actions.append(ResizePool(name, len(free), "waited long enough", _cost(choice, spec)))
        for k in first_fit(free, spec.gpus_per_pod, spec.pods) or []:
            free[k] -= spec.gpus_per_pod
        return name
    return None


def _with_room(pools: dict[str, list[int]], per_pod: int, pods: int) -> str | None:
    """The first of `pools` (free GPUs per node, by name) with room for the pods."""
    return next(
        (n for n, free in pools.items() if first_fit(free, per_pod, pods) is not None), None
    )


@dataclass(frozen=True)
class _Wait:
    """A job may wait `per_job_s` plus `per_gpu_second` x its GPUs x the runtime told. A class, not a
    closure, so that a policy can be sent to another process (compare.py runs replays there)."""

    per_job_s: float = 0.0
    per_gpu_second: float = 0.0

    def __call__(self, job: SimJob, runtime: int) -> float:
        return self.per_job_s + self.per_gpu_second * job.gpus * runtime


def no_wait(config: Config, policy: BurstPolicy, catalog: Catalog) -> Waiting:
    return Waiting("no-wait", config, policy, catalog, _Wait())


def constant_wait(
    config: Config, policy: BurstPolicy, catalog: Catalog, wait: timedelta = DEFAULT_WAIT
) -> Waiting:
    return Waiting("constant-wait", config, policy, catalog, _Wait(per_job_s=wait.total_seconds()))


def compute_wait(
    config: Config,
    policy: BurstPolicy,
    catalog: Catalog,
    jobs: Sequence[SimJob],
    budget: timedelta = DEFAULT_WAIT,
) -> Waiting:
    """Starburst's compute-wait: a job may wait k x its GPUs x its runtime before it bursts, with
    k set so that the mean of those allowed waits over `jobs` is `budget`. The budget is what
    the waits may add up to, not what they do: a job that starts on-prem sooner waits less, so
    the mean wait measured is below it."""
    return Waiting("compute-wait", config, policy, catalog, _compute_rule(jobs, budget))


def _compute_rule(jobs: Sequence[SimJob], budget: timedelta) -> _Wait:
    """k x GPUs x runtime, with k such that the allowed waits over `jobs` average `budget`."""
    work = sum(j.gpus * j.duration for j in jobs) / len(jobs)
    return _Wait(per_gpu_second=budget.total_seconds() / work)


def starburst(
    config: Config,
    policy: BurstPolicy,
    catalog: Catalog,
    jobs: Sequence[SimJob],
    budget: timedelta = DEFAULT_WAIT,
    queue_cap: int = STARBURST_QUEUE_CAP,
) -> Waiting:
    """compute-wait with on-prem out of order and a queue cap, as Starburst's simulator runs it
    in its end-to-end Philly experiments (michaelzhiluo/starburst, README: `--loop 1`, out-of-order
    scheduling; `--max_queue_length 30`)."""
    rule = _compute_rule(jobs, budget)
    return Waiting(
        "starburst", config, policy, catalog, rule, out_of_order=True, queue_cap=queue_cap
    )
