"""The decision: which pending workloads to burst, where, on what, and why not the others.

`plan(snapshot, catalog, config, now)` is pure: no I/O, no logging, no clock; the same input gives
the same Plan. The reconcile loop (service/loop.py) feeds it a Snapshot built by kube/watch.py and the
ledger, and carries the Plan out through cloud/provision.py and kube/replicate.py; `burst plan` and
the simulator call it the same way. This module runs the rounds; each step has its own module:
existing.py (the pools there are), replan.py (0), walk.py and triggers.py (1), placement.py
with candidates.py, pools.py, reuse.py, own.py and unpriced.py (2), caps.py (3).

How it decides, in order:
0. A workload planned onto a pool that launches late, whose run there would now finish after its
   deadline (on spot under spot-if-slack, with no room for a restart before it less the margin),
   is placed again first, elsewhere, and its planned dispatch cancelled where that meets its
   deadline; such a pool takes no new work in this plan.
1. The on-prem queue is simulated forward (onprem.py) in priority order. A burstable workload that
   a policy claims *wants* to burst when its estimated on-prem finish misses its deadline minus the
   policy's safety margin, when it has waited longer than the policy's maximum, when its namespace's
   GPU quota blocks it and the policy allows that trigger, or when no on-prem GPU group can ever
   run it. A workload that wants to burst leaves the queue, so those behind it move up. Under
   StrictFIFO one planned onto a pool still launching holds its place until the pool is expected
   up (the service copies it, and takes it out of the queue, only then).
2. Wanting workloads are placed most urgent first (least slack): into an existing or just-planned
   pool with free room if one fits the policy and the deadline, else onto the offer with the lowest
   total estimated cost (node-hours for provisioning + runtime + the idle tail before teardown),
   ties broken by the earliest finish, growing a pool of that offer before opening a new one.
   Spot capacity is used when the policy allows it, and with `spot-if-slack` only when the slack
   could absorb one interruption (a full restart); where a target knows its spot interruption
   rate, spot runs are priced and timed with their expected restarts. When no cloud can meet the
   deadline any more, the soonest cloud finish is placed instead, if it beats the on-prem estimate.
3. Caps are checked on the way: the policy's max price per node-hour, nodes per pool and pools, the
   per-job max cost, and every budget the workload falls under (hard budgets are never exceeded;
   reservations already held are in the snapshot, and each placement in this plan reserves more).
4. A workload refused in step 2 stays on-prem; the queue is simulated again with it, which may put
   others behind it at risk; they are placed in a next round. One refused at its price (only the
   time it saves sent it) is asked its other triggers again there: its first estimate had those
   ahead that their price sent leave, and they stay. One the placement refuses whatever sends it
   (unpriced.py: no room it may use at the pool limit, a spent hard budget) stays from the first
   round, so that the most urgent behind it is the one that takes the room.
Every pending burstable workload ends with an action or a Skip that says why, in words.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from burst.amounts import Money
from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, Config, TargetSpec, selector_matches
from burst.decide import unpriced
from burst.decide.candidates import allowed_accelerators, expected_run
from burst.decide.caps import PlanError
from burst.decide.existing import deletions, placement_for, unneeded
from burst.decide.firstfit import Held, queue_order
from burst.decide.onprem import Estimate, Sweep, queue_sweep
from burst.decide.placement import Placement, room_finish
from burst.decide.pools import pool_actions
from burst.decide.replan import AtRisk, at_risk, holding, launch_due, replan
from burst.decide.triggers import (
    Want,
    latest_start,
    sends_anyway,
    time_saved,
    trigger,
    urgency,
)
from burst.decide.walk import may_leave, remembered_refusal, walk_length, walked
from burst.decide.wording import Words
from burst.model import (
    Action,
    CancelDispatch,
    DeletePool,
    Plan,
    Skip,
    Snapshot,
    Workload,
)

__all__ = [
    "DEFAULT_RUNTIME",
    "PlanError",
    "allowed_accelerators",
    "expected_run",
    "expected_runtime",
    "plan",
]

DEFAULT_RUNTIME = timedelta(hours=4)
MAX_ROUNDS = 4
STARTED = "started on-prem before its dispatch"  # why a dispatch is cancelled

# A workload that wants to burst, as a round finds it: (its place in the order placement takes
# them, the workload, (its policy, on-prem estimate, trigger, worth)); for one that wants to burst
# whatever its estimate, no estimate nor trigger until it is placed.
_Wanting = tuple[
    tuple[bool, tuple[datetime, datetime, str]],
    Workload,
    tuple[BurstPolicy, Estimate | None, "str | Words | None", Money | None],
]


class _Planner:
    def __init__(
        self, snapshot: Snapshot, catalog: Catalog, config: Config, now: datetime, explain: bool
    ) -> None:
        if config.service is None:
            raise PlanError("planning needs the ServiceConfig (targets, exchange rates)")
        self.snapshot, self.catalog, self.now, self.explain = snapshot, catalog, now, explain
        # A target whose cluster does not answer takes no work: its copies could not be made.
        silent = set(snapshot.silent_targets)
        self.targets = {t.name: t for t in config.service.spec.targets if t.name not in silent}
        self._why = Reasons(self.targets, now, explain)
        self.queueing = config.service.spec.on_prem.queueing
        self.config = config
        self.policies = [config.policies[name] for name in sorted(config.policies)]
        self.actions: list[Action] = []
        self.deleted: set[str] = set()  # existing pools this plan deletes
        self.risks: list[AtRisk] = []  # planned onto a pool that launches late (replan.py)
        self.moved: list[CancelDispatch] = []  # their dispatches placed again
        self.placement: Placement  # made in run(), once the pools it deletes are known
        self.skips: dict[str, Skip] = {}
        self.policy_of: dict[str, BurstPolicy] = {}
        self.policy_for = Claims(self.policies)

    def _stale(
        self,
        pending: list[Workload],
        placed: set[str],
        priced: set[str],
        runtimes: dict[str, timedelta],
        held: list[Held],
    ) -> Sweep | None:
        """None where a workload placed in an earlier round has lost its reason now that those
        refused since stay, or where only its price on waiting sends it now though it was placed
        for a trigger (`priced`: those placed for their price), as what that is worth caps its
        cost; else the sweep that found so. Under BestEffortFIFO one that stays can let one
        behind it start sooner: it holds up a wide one between them, and the small one behind
        runs past both. Each placed workload is estimated as if it alone of them stayed: they
        all leave."""
        cluster, queueing, absent = self.snapshot.onprem, self.queueing, frozenset(placed)
        sweep = queue_sweep(cluster, self.now, queueing, pending, runtimes, absent, held)
        for w in pending:
            if w.uid in placed:
                sweep.leaves(w, runtimes[w.uid])
            else:
                sweep.stays(w, runtimes[w.uid])
        # Those placed in room an open pool had took it: their own finish there is what counts.
        finishes = {d.workload: d.estimated_finish for d in self.placement.dispatches}
        for w in pending:
            if w.uid not in placed:
                continue
            policy = self.policy_of[w.uid]
            if sends_anyway(w, policy.spec.trigger, self.now):
                continue  # its reason holds whatever its estimate
            runtime = runtimes[w.uid]
            latest = latest_start(w, policy.spec.trigger, runtime)
            if latest is not None and not sweep.starts_by(w, runtime, latest):
                continue  # its deadline still sends it: the queue is run no further for it
            est = sweep.left(w, runtime)
            why, _, worth = self._why(w, policy, est, sweep, runtime, finishes.get(w.uid))
            if why is None or (worth is not None and w.uid not in priced):
                return None
        return sweep

    def _open(self) -> None:
        closed = self.deleted | {r.pool for r in self.risks}
        self.placement = placement_for(
            self.snapshot, self.catalog, self.config, self.targets, closed, self.now
        )
        self.moved = replan(self.placement, self.risks, self.now)
        self._why.room = functools.partial(room_finish, self.placement)

    def _unneeded(self) -> list[DeletePool]:
        """Idle pools no work is expected for before a new one launches, once the work is placed."""
        given = {d.workload: d.pool for d in self.placement.dispatches}
        kept = self.deleted | set(given.values())
        claims = (self.policy_of, given.keys(), expected_runtime)
        return unneeded(
            self.snapshot, self.config, self.targets, kept, claims, self.catalog, self.now
        )

    def _none_fits(self, policies: list[BurstPolicy]) -> bool:
        """Whether no policy claiming a waiting workload has room for any (never when explaining:
        every workload's reason is worded then)."""
        no_room = self.placement.no_room
        return not self.explain and all(no_room.full(self.placement, p) for p in policies)

    # -- the whole plan --

    def _waiting(self) -> tuple[list[Workload], list[Workload]]:
        """The pending workloads, each claimed, in one pass (a replay's queue holds thousands, on
        every plan), and the burstable ones planned onto a pool; dispatches of those started
        on-prem cancelled."""
        pending: list[Workload] = []
        planned: list[Workload] = []
        for w in self.snapshot.workloads:
            if w.phase == "pending":
                pending.append(w)
                policy = self.policy_for(w) if w.burstable else None
                if policy is not None:
                    self.policy_of[w.uid] = policy
                elif w.burstable:
                    self.skips[w.uid] = unclaimed(w)
            elif w.phase == "started" and w.planned_pool is not None:
                self.actions.append(CancelDispatch(w.uid, w.planned_pool, STARTED))
            elif w.phase == "planned" and w.burstable and w.planned_pool is not None:
                planned.append(w)
        return pending, planned

    def run(self) -> Plan:
        pending, planned = self._waiting()
        deleted = deletions(self.snapshot.pools, self.config.policies, self.now)
        self.actions += deleted
        self.deleted = {d.pool for d in deleted}
        self.risks = at_risk(
            planned, self.snapshot, self.targets, self.policy_for, expected_runtime, self.now
        )
        self.policy_of.update((r.w.uid, r.policy) for r in self.risks)
        self._open()
        claiming = list({p.metadata.name: p for p in self.policy_of.values()}.values())
        left = False  # whether a workload that wants to burst is left waiting (Plan.more_from)
        if self._none_fits(claiming):
            pending = []  # nothing to place: no queue to walk
            left = bool(claiming)
        pending.sort(key=queue_order)
        # Known only for a queue walked: two plans in three of a replay with config/ place nothing.
        runtimes = {w.uid: expected_runtime(w, self.policy_of.get(w.uid)) for w in pending}
        held = holding(
            planned, self.snapshot, self.targets, self.policy_for, expected_runtime, self.now
        )
        stays: set[str] = set()  # refused: they wait on-prem
        # Refused where only the time they would save sent them: they wait on-prem unless another
        # trigger sends them in a later round, once those refused ahead of them stay.
        unworthy: set[str] = set()
        placed: set[str] = set()
        priced: set[str] = set()  # those of them placed for the time they save, priced
        for _ in range(MAX_ROUNDS):
            # Before the room is looked at: a placement that lost its reason gives its room back.
            kept = None
            if placed and self.queueing == "BestEffortFIFO":
                kept = self._stale(pending, placed, priced, runtimes, held)
                if kept is None:
                    self._open()
                    placed.clear()
                    priced.clear()
            if self._none_fits(claiming):
                left = True
                break
            # Why the placement would refuse a workload whatever sends it (None: it may be placed):
            # it does not change while a round walks the queue, which asks it of each up to three
            # times.
            room = remembered_refusal()
            settled = placed | stays
            walk = walk_length(
                pending,
                may_leave(self.policy_of, runtimes, self.placement, room, settled, self.explain),
                self.queueing,
            )
            left = left or walk < len(pending)  # those behind: settled, unclaimed or refused
            if not walk:
                break
            queue = (w for w in pending if w.uid not in placed)  # only best-effort reads it
            seen = (placed, stays, self.policy_of, self.placement, room)
            looked, sends = walked(pending[:walk], seen, runtimes, self.now, self.queueing)
            # The run that found no placement stale runs the queue this round walks, the placed
            # out of it, unless some leave unestimated (they would be out of it too).
            if kept is None or sends:
                cluster, queueing = self.snapshot.onprem, self.queueing
                kept = queue_sweep(cluster, self.now, queueing, queue, runtimes, sends, held)
            sweep = kept
            # Wanting workloads, each with its place in the order they are placed in. Their Want is
            # made when they are placed: most of a long queue is refused for room unpriced.
            wants: list[_Wanting] = []
            now, explain = self.now, self.explain
            for w, policy, full, anyway in looked:  # thousands a plan in a replay's backlog
                uid = w.uid
                runtime = runtimes[uid]
                if policy is None:
                    sweep.stays(w, runtime)
                    continue
                left = left or full is not None
                if full is not None and not explain:
                    sweep.stays(w, runtime)  # it would be refused whatever sends it
                    continue
                if anyway:
                    # It wants to burst whatever its estimate says, and leaves the queue: its
                    # estimate and trigger are asked only if it is placed (a replay's backlog
                    # holds thousands so, for one or two placed).
                    sweep.leaves(w, runtime)
                    wants.append(((False, urgency(w, runtime, now)), w, (policy, None, None, None)))
                    continue
                est = sweep.estimate(w, runtime)
                why, why_not, worth = self._why(w, policy, est, sweep, runtime)
                if worth is not None and uid in unworthy:
                    sweep.stay(w, est)  # refused at its price already: its skip says so
                    continue
                if why is None or full is not None:
                    sweep.stay(w, est)
                    if explain:
                        reason = why_not if why is None else f"{why}, but {full}"
                        self.skips[uid] = Skip(
                            uid, w.namespace, w.name, reason, onprem_finish=est.finish
                        )
                    continue
                sweep.leave()
                order = (worth is not None, urgency(w, runtime, now))
                wants.append((order, w, (policy, est, why, worth)))
            if not wants:
                break
            refused = False
            # Those only the time they save sends come last: they must not take the room or the
            # budget a deadline needs. Taken from a heap: once no policy has room, the rest are
            # refused unlooked at (thousands, in a replay's backlog, for the one or two placed).
            heapq.heapify(wants)
            while wants:
                if self._none_fits(claiming):
                    refused = True
                    stays.update(wanting[1].uid for wanting in wants)
                    break
                _, w, (policy, onprem, why, worth) = heapq.heappop(wants)
                refusal = unpriced.refusal(self.placement, w, policy, runtimes[w.uid])
                if onprem is None and (refusal is None or self.explain):
                    onprem = sweep.left(w, runtimes[w.uid])  # it leaves whatever its estimate
                    why, _, worth = self._why(w, policy, onprem, sweep, runtimes[w.uid])
                if refusal is None:
                    assert why is not None and onprem is not None
                    want = Want(w, policy, runtimes[w.uid], onprem, why, w.deadline, worth)
                    refusal = self.placement.place(want)
                if refusal is None:
                    placed.add(w.uid)
                    if worth is not None:
                        priced.add(w.uid)
                    self.skips.pop(w.uid, None)
                else:
                    refused = True
                    (unworthy if worth is not None else stays).add(w.uid)
                    if self.explain:
                        assert onprem is not None
                        self.skips[w.uid] = Skip(
                            w.uid,
                            w.namespace,
                            w.name,
                            f"{why}, but {refusal}",
                            onprem_finish=onprem.finish,
                        )
            left = left or refused
            if not refused:
                break  # the next round would see the same queue: those placed leave it either way
        self.actions += self._unneeded()
        return Plan(
            tuple(
                self.moved  # first: a dispatch moved is cancelled before it is made again
                + pool_actions(self.placement.pools, self.catalog)
                + self.placement.dispatches
                + self.actions
            ),
            tuple(sorted(self.skips.values(), key=lambda s: (s.namespace, s.name, s.workload)))
            if self.explain
            else (),
            more_from=self.now if left else launch_due(planned, self.snapshot, self.targets),
        )


class Reasons:
    """Why a workload should burst, from its estimate: a trigger, else, with a price on waiting,
    the time a cloud would save it."""

    def __init__(self, targets: Mapping[str, TargetSpec], now: datetime, explain: bool) -> None:
        self.targets, self.now, self.explain = targets, now, explain
        # When the room an open pool has would finish a workload (the placement's, once open).
        self.room: Callable[[Workload, BurstPolicy, timedelta], datetime | None] | None = None

    def __call__(
        self,
        w: Workload,
        policy: BurstPolicy,
        est: Estimate,
        sweep: Sweep,
        runtime: timedelta,
        placed: datetime | None = None,
    ) -> tuple[str | Words | None, str, Money | None]:
        """(why it should burst, or None; why not, worded only when explaining; what the time it
        would save is worth, when that is the reason). `placed`: the finish of the place the plan
        gave it already, which stands in for the room it took."""
        why, why_not = trigger(w, policy, est, sweep, self.now, self.explain)
        if why is None and policy.spec.trigger.wait_price is not None:
            # No trigger sends it: the time it would save may, in a new pool or in room on one
            # that is open (sooner than any launch where that pool is up).
            launch = fastest_launch(policy, self.targets)
            cloud = None if launch is None else self.now + launch + runtime
            if est.finish is not None and est.finish > self.now + runtime and self.room:
                room = self.room(w, policy, runtime) if placed is None else placed
                if room is not None and (cloud is None or room < cloud):
                    cloud = room
            saved = time_saved(w, policy, est, cloud)
            if saved is not None:
                return saved[0], why_not, saved[1]
        return why, why_not, None


def expected_runtime(w: Workload, policy: BurstPolicy | None) -> timedelta:
    """The run a plan counts for `w`: its own (declared, or learned from runs like it), else its
    policy's default (the service records a dispatch's so), else DEFAULT_RUNTIME."""
    if w.expected_runtime is not None:
        return w.expected_runtime
    return policy.spec.defaults.expected_runtime if policy else DEFAULT_RUNTIME


def fastest_launch(policy: BurstPolicy, targets: Mapping[str, TargetSpec]) -> timedelta | None:
    """The soonest a new pool of the policy's can take work, on the targets that answer."""
    launches = [targets[t].provisioning for t in policy.spec.placement.targets if t in targets]
    return min(launches, default=None)


def unclaimed(w: Workload) -> Skip:
    reason = f"no BurstPolicy claims namespace {w.namespace} with these labels"
    return Skip(w.uid, w.namespace, w.name, reason)


class Claims:
    """The policy that claims a workload (claimant), remembered per namespace and labels: asked
    for every waiting workload on every plan, and most share them (a replay's have no labels:
    the key is then the namespace alone, no tuple to make)."""

    def __init__(self, policies: list[BurstPolicy]) -> None:
        self.policies = policies
        self._known: dict[object, BurstPolicy | None] = {}

    def __call__(self, w: Workload) -> BurstPolicy | None:
        key = (w.namespace, tuple(w.labels.items())) if w.labels else w.namespace
        if key not in self._known:
            self._known[key] = claimant(self.policies, w.namespace, w.labels)
        return self._known[key]


def claimant(
    policies: list[BurstPolicy], namespace: str, labels: Mapping[str, str]
) -> BurstPolicy | None:
    """The first policy whose selector claims a workload of `namespace` and `labels`."""
    for p in policies:
        if selector_matches(p.spec.selector, namespace, labels):
            return p
    return None


def plan(
    snapshot: Snapshot, catalog: Catalog, config: Config, now: datetime, *, skips: bool = True
) -> Plan:
    """Decide what to burst now. Pure: same input, same Plan. `skips=False` leaves the Skips out:
    their reasons are worded for every waiting workload, which a simulation never reads."""
    return _Planner(snapshot, catalog, config, now, skips).run()
