"""Invariants of decide.plan() under hypothesis: random queues, pools, budgets and policies.

Every property below is checked on each of 400 generated snapshots against the real shipped
catalog (one generated snapshot serves all properties: generating is the slow part).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burst import decide
from burst.amounts import Money
from burst.cloud import catalog
from burst.config import Config
from burst.decide.existing import UP_STATES
from burst.decide.onprem import Estimate, estimate_all, queue_sweep
from burst.decide.placement import Placement
from burst.decide.planner import _Planner
from burst.decide.triggers import Want
from burst.decide.unpriced import LateRefusals, NoRoom, SpentBudgets
from burst.model import (
    BudgetView,
    CancelDispatch,
    CreatePool,
    DeletePool,
    Dispatch,
    OfferKey,
    OnPrem,
    Plan,
    PoolView,
    ResizePool,
    RunningWorkload,
    Snapshot,
    Workload,
)
from tests.builders import NOW, TARGETS, make_config, policy_spec

CATALOG = catalog.shipped()
PRODUCTS = ["V100", "T4", "A100"]
TEAMS = ["cms", "atlas", "lhcb"]
RATES = {"CHF": "0.80"}

POLICY_VARIANTS: list[dict[str, Any]] = [
    policy_spec(),
    policy_spec(
        trigger={"maxPendingWait": "2h", "quotaExhausted": True},
        placement={
            "targets": ["aws-euc1", "gcp-euw4"],
            "capacity": "spot-if-slack",
            "accelerators": {"V100": ["V100", "T4", "A10G"], "T4": ["T4", "L4"]},
        },
        limits={
            "currency": "CHF",
            "maxHourlyPrice": "12.00",
            "maxNodesPerPool": 3,
            "maxPools": 2,
            "maxCostPerJob": "150.00",
        },
        teardown={"idleTtl": "30m", "idleTtlChoice": "next-arrival"},
    ),
    policy_spec(
        placement={
            "targets": ["azure-eastus"],
            "capacity": "spot",
            "accelerators": {"A100": ["A100", "A100-80GB"]},
        },
        limits={"maxNodesPerPool": 2, "maxPools": 1},
        teardown={"idleTtl": "5m", "idleTtlChoice": "next-arrival", "maxLifetime": "6h"},
    ),
    # A price on waiting: some burst for the time they save, and some it refuses at their price.
    policy_spec(
        trigger={"deadlineSafetyMargin": "30m", "waitPrice": "0.50"},
        limits={"maxNodesPerPool": 2, "maxPools": 2},
    ),
]
CONFIGS = [
    make_config(
        ("ml", {**spec, "placement": {**spec["placement"], "sharePools": share}}),
        (
            "other",
            policy_spec(selector={"namespaces": ["other"]}, placement={"sharePools": share}),
        ),
        rates=RATES,
        queueing=queueing,
    )
    for spec in POLICY_VARIANTS
    for queueing in ("StrictFIFO", "BestEffortFIFO")
    for share in (False, True)  # the two policies' pools taken by either's workloads
]

M = timedelta(minutes=1)
minutes = st.integers(min_value=0, max_value=48 * 60).map(lambda m: timedelta(minutes=m))
# A node's price per hour as a pool's dispatches reserved it: often below the catalog's.
prices = st.integers(1, 400).map(lambda c: Money.of(Decimal(c) / 10, "USD"))


@st.composite
def workloads(draw: st.DrawFn, uid: str, pools: tuple[str, ...] = ()) -> Workload:
    created = NOW - draw(minutes)
    phase = draw(st.sampled_from(["pending"] * 8 + ["started", "planned"]))
    return Workload(
        uid=uid,
        kind=draw(st.sampled_from(["Job", "PyTorchJob"])),
        namespace=draw(st.sampled_from(["ml", "ml", "other", "default"])),
        name=uid,
        team=draw(st.sampled_from(TEAMS)),
        gpus_per_pod=draw(st.sampled_from([1, 1, 2, 4, 8])),
        pods=draw(st.integers(1, 4)),
        created=created,
        pending_since=created,
        accelerator=draw(st.sampled_from([*PRODUCTS, None])),
        burstable=draw(st.booleans()),
        deadline=draw(st.none() | minutes.map(lambda d: NOW + d)),
        expected_runtime=draw(st.integers(5, 20 * 60).map(lambda m: timedelta(minutes=m))),
        max_cost=draw(st.none() | st.integers(1, 400).map(lambda a: Money.of(a, "USD"))),
        priority=draw(st.integers(0, 2)),
        cpu_per_pod=draw(st.sampled_from([0.0, 4.0, 16.0])),
        memory_gib_per_pod=draw(st.sampled_from([0.0, 16.0, 120.0])),
        quota_blocked=draw(st.booleans()),
        phase=phase,
        # A planned one waits on a pool there is (or one gone since); a started one's is gone.
        planned_pool=draw(st.sampled_from([*pools, "gone"])) if phase == "planned" else None,
    )


@st.composite
def pools(draw: st.DrawFn, name: str) -> PoolView:
    offer = draw(
        st.sampled_from(
            [
                OfferKey("aws", "eu-central-1", "p3.8xlarge", "on-demand", "V100", 4),
                OfferKey("gcp", "europe-west4", "n1-standard-8", "spot", "T4", 1),
                OfferKey("azure", "eastus", "Standard_NC24ads_A100_v4", "spot", "A100-80GB", 1),
            ]
        )
    )
    target = {"aws": "aws-euc1", "gcp": "gcp-euw4", "azure": "azure-eastus"}[offer.cloud]
    nodes = draw(st.integers(1, 3))
    free = tuple(draw(st.integers(0, offer.gpus)) for _ in range(nodes))
    return PoolView(
        name=name,
        target=target,
        policy=draw(st.sampled_from(["ml", "other"])),
        offer=offer,
        nodes=nodes,
        state=draw(st.sampled_from(["ready", "creating"])),
        created=NOW - draw(minutes),
        free_gpus=free,
        # The price its dispatches reserved, or none known (then the catalog's).
        hourly=draw(st.none() | prices),
        # When each node's known work ends: what a pool past its lifetime drains.
        busy_until=tuple(draw(st.none() | minutes.map(lambda d: NOW + d)) for _ in range(nodes)),
        # Idle for long, or for less than the TTLs (5m, 10m, 30m): those the next arrival decides.
        idle_since=draw(
            st.none()
            | minutes.map(lambda d: NOW - d)
            | st.integers(0, 30).map(lambda m: NOW - M * m)
        ),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, Config]:
    n = draw(st.integers(1, 25))
    existing = tuple(draw(pools(f"pool-{i}")) for i in range(draw(st.integers(0, 3))))
    ws = tuple(draw(workloads(f"w{i:02d}", tuple(p.name for p in existing))) for i in range(n))
    capacity = {p: draw(st.sampled_from([0, 4, 8, 16])) for p in PRODUCTS}
    running = tuple(
        RunningWorkload(f"r{i}", p, draw(st.integers(1, max(1, capacity[p]))), NOW + draw(minutes))
        for i, p in enumerate(draw(st.lists(st.sampled_from(PRODUCTS), max_size=4)))
        if capacity[p]
    )
    budgets = tuple(
        BudgetView(
            f"b-{team}",
            "team",
            team,
            Money.of(draw(st.integers(0, 300)), draw(st.sampled_from(["USD", "CHF"]))),
            hard=draw(st.booleans()),
        )
        for team in draw(st.lists(st.sampled_from(TEAMS), unique=True))
    )
    sent = {"ml": draw(st.integers(0, 12))}  # how often work came in the last hour
    snap = Snapshot(
        workloads=ws,
        onprem=OnPrem(capacity, running),
        pools=existing,
        budgets=budgets,
        sent_last_hour=sent,
    )
    return snap, draw(st.sampled_from(CONFIGS))


def _plan(snap: Snapshot, cfg: Config) -> Plan:
    return decide.plan(snap, CATALOG, cfg, NOW)


def _policy_of(w: Workload, cfg: Config) -> str | None:
    return {"ml": "ml", "other": "other"}.get(w.namespace)


def _pool_offers(snap: Snapshot, plan: Plan) -> dict[str, tuple[OfferKey, str, str]]:
    found = {p.name: (p.offer, p.target, p.policy) for p in snap.pools}
    found |= {
        a.pool: (a.offer, a.target, a.policy) for a in plan.actions if isinstance(a, CreatePool)
    }
    return found


def _hourly(snap: Snapshot, plan: Plan, pool: str) -> Money:
    """A pool's price per node-hour: a new one's; an existing one's as its dispatches reserved
    it, else the catalog's."""
    for a in plan.actions:
        if isinstance(a, CreatePool) and a.pool == pool:
            return a.hourly
    (pv,) = [p for p in snap.pools if p.name == pool]
    if pv.hourly is not None:
        return pv.hourly
    offer = CATALOG.get(pv.offer)
    assert offer is not None
    return offer.hourly


def no_plan_exceeds_a_hard_budget(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    by_uid = {w.uid: w for w in snap.workloads}
    for b in snap.budgets:
        if not b.hard:
            continue
        rate = Decimal(1) if b.remaining.currency == "USD" else Decimal(RATES["CHF"])
        spent = sum(
            (Decimal(d.estimated_cost.micros) * rate).to_integral_value(rounding="ROUND_CEILING")
            for d in plan.actions
            if isinstance(d, Dispatch)
            if by_uid[d.workload].team == b.value
        )
        assert spent <= max(b.remaining.micros, 0), (b, plan)


def no_plan_exceeds_a_cap(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    offers = _pool_offers(snap, plan)
    by_uid = {w.uid: w for w in snap.workloads}
    new_pools: dict[str, int] = {}
    for a in plan.actions:
        if isinstance(a, CreatePool | ResizePool):
            policy = cfg.policies[offers[a.pool][2]].spec
            assert a.nodes <= policy.limits.max_nodes_per_pool
        if isinstance(a, CreatePool):
            new_pools[a.policy] = new_pools.get(a.policy, 0) + 1
            limits = cfg.policies[a.policy].spec.limits
            if limits.max_hourly_price is not None:
                rate = Decimal(1) if limits.currency == "USD" else Decimal(RATES[limits.currency])
                assert a.hourly.to_decimal() * rate <= limits.max_hourly_price
        if isinstance(a, Dispatch):
            w = by_uid[a.workload]
            limits = cfg.policies[_policy_of(w, cfg) or ""].spec.limits
            if w.max_cost is not None:
                assert a.estimated_cost <= w.max_cost
            if limits.max_cost_per_job is not None:
                rate = Decimal(1) if limits.currency == "USD" else Decimal(RATES[limits.currency])
                assert a.estimated_cost.to_decimal() * rate <= limits.max_cost_per_job + Decimal(
                    "0.000001"
                )
    for policy, count in new_pools.items():
        active = sum(1 for p in snap.pools if p.policy == policy)
        assert active + count <= cfg.policies[policy].spec.limits.max_pools or count == 0


def dispatches_respect_gpu_and_target(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    offers = _pool_offers(snap, plan)
    by_uid = {w.uid: w for w in snap.workloads}
    assert cfg.service is not None
    regions = {t.name: (t.cloud, t.region) for t in cfg.service.spec.targets}
    for d in plan.actions:
        if not isinstance(d, Dispatch):
            continue
        w = by_uid[d.workload]
        offer, target, pool_policy = offers[d.pool]
        policy_name = _policy_of(w, cfg) or ""
        policy = cfg.policies[policy_name]
        if pool_policy != policy_name:  # another policy's pool: both share theirs
            assert policy.spec.placement.share_pools
            assert cfg.policies[pool_policy].spec.placement.share_pools
            # and it is no dearer than the workload's policy allows a node-hour
            limits = policy.spec.limits
            if limits.max_hourly_price is not None:
                rate = Decimal(1) if limits.currency == "USD" else Decimal(RATES[limits.currency])
                assert _hourly(snap, plan, d.pool).to_decimal() * rate <= limits.max_hourly_price
        assert offer.accelerator in decide.allowed_accelerators(policy, w.accelerator, CATALOG)
        assert target in policy.spec.placement.targets and d.target == target
        assert (offer.cloud, offer.region) == regions[target]
        assert offer.gpus >= w.gpus_per_pod
        if offer.capacity == "spot":
            assert policy.spec.placement.capacity != "on-demand"


def a_pool_grows_or_opens_for_its_own_policy_alone(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    """Another policy's workload takes a shared pool's room as it is: a pool grown or opened in a
    plan takes work of its own policy in it."""
    offers = _pool_offers(snap, plan)
    by_uid = {w.uid: w for w in snap.workloads}
    own = {
        d.pool
        for d in plan.actions
        if isinstance(d, Dispatch) and _policy_of(by_uid[d.workload], cfg) == offers[d.pool][2]
    }
    for a in plan.actions:
        if isinstance(a, CreatePool | ResizePool):
            assert a.pool in own, (a, plan)


def only_pending_burstable_workloads_are_touched_and_each_exactly_once(
    snap: Snapshot, cfg: Config, plan: Plan
) -> None:
    dispatched = [a.workload for a in plan.actions if isinstance(a, Dispatch)]
    skipped = [s.workload for s in plan.skips]
    expected = {w.uid for w in snap.workloads if w.burstable and w.phase == "pending"}
    moved = {a.workload for a in plan.actions if isinstance(a, CancelDispatch)} - {
        w.uid for w in snap.workloads if w.phase == "started"
    }
    assert sorted(dispatched + skipped) == sorted(expected | moved)
    for s in plan.skips:
        assert s.reason


def _held(snap: Snapshot, cfg: Config) -> list[tuple[Workload, timedelta, datetime]]:
    """The workloads planned onto a pool still launching, each held in the on-prem queue until
    its pool is expected up: its target's launch estimate after it was asked for, or as long
    again from now once past that (a strict queue waits behind them)."""
    assert cfg.service is not None
    targets = {t.name: t for t in cfg.service.spec.targets if t.name not in snap.silent_targets}
    pools = {p.name: p for p in snap.pools}
    out = []
    for w in snap.workloads:
        pv = pools.get(w.planned_pool or "")
        if w.phase != "planned" or not w.burstable or pv is None or pv.target not in targets:
            continue
        if pv.state in ("requested", "creating"):
            launch = targets[pv.target].provisioning
            up = pv.created + launch if pv.created + launch > NOW else NOW + launch
            runtime = decide.expected_runtime(w, cfg.policies.get(_policy_of(w, cfg) or ""))
            out.append((w, runtime, up))
    return out


def workloads_that_fit_on_prem_in_time_are_not_burst_without_another_trigger(
    snap: Snapshot, cfg: Config, plan: Plan
) -> None:
    dispatched = {a.workload for a in plan.actions if isinstance(a, Dispatch)}
    pending = [w for w in snap.workloads if w.phase == "pending"]
    runtimes = {w.uid: w.expected_runtime or decide.DEFAULT_RUNTIME for w in pending}
    # Ahead of a workload, exactly the dispatched ones leave the queue.
    assert cfg.service is not None
    queueing = cfg.service.spec.on_prem.queueing
    leaving, held = frozenset(dispatched), _held(snap, cfg)
    estimates = estimate_all(snap.onprem, pending, runtimes, NOW, leaving, queueing, held)
    reasons = {a.workload: a.reason for a in plan.actions if isinstance(a, Dispatch)}
    for w in pending:
        if w.uid not in dispatched or "sooner, worth" in reasons[w.uid]:
            continue  # a price on waiting sends what its time saved pays for
        policy = cfg.policies[_policy_of(w, cfg) or ""].spec
        est = estimates[w.uid]
        max_wait = policy.trigger.max_pending_wait
        fired = (
            est.finish is None
            or (
                w.deadline is not None
                and est.finish > w.deadline - policy.trigger.deadline_safety_margin
            )
            or (max_wait is not None and NOW - w.pending_since >= max_wait)
            or (w.quota_blocked and policy.trigger.quota_exhausted)
        )
        assert fired, (queueing, w, est)


def reasons_left_out_change_no_action(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    """A replay asks for no reasons (skips=False), and takes shortcuts where they are not
    worded: it must decide the same."""
    assert decide.plan(snap, CATALOG, cfg, NOW, skips=False).actions == plan.actions


def refusals_remembered_change_nothing(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    """At a pool limit, a workload is refused without pricing when one of its kind that had more
    time was (placement.LateRefusals): the plan must be the one pricing each gives."""
    with patch.object(LateRefusals, "refuses", lambda *_: False):
        assert _plan(snap, cfg) == plan


def refusals_for_no_room_are_what_pricing_gives(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    """A workload no pool its policy lets it use has room for is refused unpriced
    (unpriced.NoRoom), in the walk and in the placement: priced with no deadline at all, it must
    be refused the same."""
    _refused_unpriced_as_priced(NoRoom, snap, cfg, plan, same_words=True)


def refusals_for_a_spent_budget_are_what_pricing_gives(
    snap: Snapshot, cfg: Config, plan: Plan
) -> None:
    """A workload a hard budget over it has less left for than any run of it could ask is
    refused unpriced, early or late (unpriced.SpentBudgets): priced, with no deadline at all, it
    must be refused too. (It then stays in the queue the round estimates, as one with no room
    does, where pricing it would have let those behind it be estimated as if it left.)"""
    _refused_unpriced_as_priced(SpentBudgets, snap, cfg, plan, same_words=False)


def _refused_unpriced_as_priced(
    kind: type[NoRoom] | type[SpentBudgets],
    snap: Snapshot,
    cfg: Config,
    plan: Plan,
    same_words: bool,
) -> None:
    """Each refusal `kind` gives, asked again of pricing with no deadline at all: refused too (in
    the same words, when `same_words`); and the plan the same for the asking."""
    refusal = kind.refusal

    def priced_too(
        self: Any, placement: Placement, w: Workload, policy: Any, runtime: timedelta
    ) -> Any:
        found = refusal(self, placement, w, policy, runtime)
        if found is not None:
            anywhere = Want(w, policy, runtime, Estimate(None, None, None), "asked", None)
            priced = placement._place(anywhere)
            assert priced == found if same_words else priced is not None, found
        return found

    with patch.object(kind, "refusal", priced_too):
        assert _plan(snap, cfg) == plan


def a_round_walking_the_stale_check_run_plans_as_on_a_new_run(
    snap: Snapshot, cfg: Config, plan: Plan
) -> None:
    """Under BestEffortFIFO a round after the first walks the run its stale check made (the queue
    with the placed absent from it), where none leaves it unestimated: given a run made anew of
    the queue less the placed instead, it must plan the same."""
    stale = _Planner._stale

    def anew(
        self: Any, pending: Any, placed: set[str], priced: set[str], runtimes: Any, held: Any
    ) -> Any:
        found = stale(self, pending, placed, priced, runtimes, held)
        if found is None:
            return None
        queue = [w for w in pending if w.uid not in placed]
        cluster = self.snapshot.onprem
        return queue_sweep(cluster, self.now, self.queueing, queue, runtimes, held=held)

    with patch.object(_Planner, "_stale", anew):
        assert _plan(snap, cfg) == plan


def the_same_input_gives_the_same_plan(snap: Snapshot, cfg: Config, plan: Plan) -> None:
    first = plan
    assert _plan(snap, cfg) == first
    assert (
        _plan(
            Snapshot(
                **{
                    **snap.__dict__,
                    "workloads": tuple(reversed(snap.workloads)),
                    "pools": tuple(reversed(snap.pools)),
                }
            ),
            cfg,
        )
        == first
    )


def a_pool_deleted_is_deleted_once_and_given_no_work(
    snap: Snapshot, cfg: Config, plan: Plan
) -> None:
    deleted = [a.pool for a in plan.actions if isinstance(a, DeletePool)]
    assert len(deleted) == len(set(deleted)), plan
    given = {a.pool for a in plan.actions if isinstance(a, (Dispatch, ResizePool))}
    assert not given & set(deleted), plan


def a_dispatch_moved_off_a_late_pool_is_cancelled_first_and_made_again_elsewhere(
    snap: Snapshot, cfg: Config, plan: Plan
) -> None:
    """Never a planned dispatch cancelled and not made again (its workload would wait for a
    pass), nor made again before its cancel (the service would refuse the cancel and the job
    sit on two pools), nor moved off a pool that is up or on time: only a late launch moves it."""
    planned = {w.uid: w for w in snap.workloads if w.phase == "planned"}
    by_name = {p.name: p for p in snap.pools}
    assert cfg.service is not None
    launch = {t.name: t.provisioning for t in cfg.service.spec.targets}
    at = {id(a): k for k, a in enumerate(plan.actions)}
    dispatch_of = {a.workload: a for a in plan.actions if isinstance(a, Dispatch)}
    for a in plan.actions:
        if not isinstance(a, CancelDispatch) or a.workload not in planned:
            continue
        pv = by_name[a.pool]
        assert planned[a.workload].planned_pool == a.pool
        assert pv.state in ("requested", "creating")
        assert pv.created + launch[pv.target] <= NOW  # at or past its estimate, and not up
        again = dispatch_of[a.workload]
        assert again.pool != a.pool and at[id(a)] < at[id(again)], plan
    late = {a.pool for a in plan.actions if isinstance(a, CancelDispatch)}
    given = {a.pool for a in plan.actions if isinstance(a, (Dispatch, ResizePool))}
    assert not late & given, plan
    for uid in planned.keys() & dispatch_of.keys():
        assert any(isinstance(a, CancelDispatch) and a.workload == uid for a in plan.actions)


def a_pool_past_its_lifetime_takes_work_that_ends_before_its_own(
    snap: Snapshot, cfg: Config, plan: Plan
) -> None:
    """A pool past its lifetime is given only work expected to end by the last of the work it
    runs (it is kept up no longer for it), and grown only while its policy is at its pool
    limit."""
    by_name = {p.name: p for p in snap.pools}
    created = Counter(a.policy for a in plan.actions if isinstance(a, CreatePool))
    for a in plan.actions:
        pv = by_name.get(a.pool) if isinstance(a, (Dispatch, ResizePool)) else None
        if pv is None or pv.policy not in cfg.policies:
            continue
        policy = cfg.policies[pv.policy]
        if NOW - pv.created < policy.spec.teardown.max_lifetime:
            continue
        if isinstance(a, Dispatch):
            ends = [b for b in pv.busy_until if b is not None]
            assert ends and a.estimated_finish <= max(ends)
        else:
            up = sum(1 for p in snap.pools if p.policy == pv.policy and p.state in UP_STATES)
            assert up + created[pv.policy] >= policy.spec.limits.max_pools


PROPERTIES = [
    a_pool_past_its_lifetime_takes_work_that_ends_before_its_own,
    a_dispatch_moved_off_a_late_pool_is_cancelled_first_and_made_again_elsewhere,
    a_pool_deleted_is_deleted_once_and_given_no_work,
    no_plan_exceeds_a_hard_budget,
    no_plan_exceeds_a_cap,
    dispatches_respect_gpu_and_target,
    only_pending_burstable_workloads_are_touched_and_each_exactly_once,
    workloads_that_fit_on_prem_in_time_are_not_burst_without_another_trigger,
    the_same_input_gives_the_same_plan,
    a_pool_grows_or_opens_for_its_own_policy_alone,
    reasons_left_out_change_no_action,
    refusals_remembered_change_nothing,
    refusals_for_no_room_are_what_pricing_gives,
    refusals_for_a_spent_budget_are_what_pricing_gives,
    a_round_walking_the_stale_check_run_plans_as_on_a_new_run,
]


def _every_property_holds(snap: Snapshot, cfg: Config) -> None:
    plan = _plan(snap, cfg)
    for check in PROPERTIES:
        check(snap, cfg, plan)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_plan_invariants(scenario: tuple[Snapshot, Config]) -> None:
    _every_property_holds(*scenario)


@st.composite
def backlogs_at_the_pool_limit(draw: st.DrawFn) -> tuple[Snapshot, Config]:
    """A policy at its pool limit (1 pool of at most 2 nodes) with room for some, and a backlog of
    few kinds of workload, of many deadlines and runtimes, that on-prem cannot start for days."""
    # On spot or on demand: under spot-if-slack the room on spot is for those with slack alone.
    capacity = draw(st.sampled_from(["spot", "on-demand"]))
    offer = OfferKey("azure", "eastus", "Standard_NC24ads_A100_v4", capacity, "A100-80GB", 1)
    nodes = draw(st.integers(1, 2))
    pool = PoolView(
        name="pool-0",
        target="azure-eastus",
        policy="ml",
        offer=offer,
        nodes=nodes,
        state=draw(st.sampled_from(["ready", "creating"])),
        created=NOW - draw(minutes),
        free_gpus=tuple(draw(st.sampled_from([0, 1, 1])) for _ in range(nodes)),
        hourly=draw(st.none() | prices),
        # Past its lifetime (24 h) for some: the work it drains ends within a few hours or none.
        busy_until=tuple(
            draw(st.none() | st.integers(0, 360).map(lambda m: NOW + M * m)) for _ in range(nodes)
        ),
    )
    # Another policy's pool, whose room the backlog may take where both share their pools.
    lent = replace(
        pool,
        name="pool-1",
        policy="other",
        nodes=1,
        free_gpus=(draw(st.sampled_from([0, 1])),),
        hourly=draw(st.none() | prices),
        busy_until=(None,),
    )
    ws = tuple(
        Workload(
            uid=f"w{i:02d}",
            kind="Job",
            namespace="ml",
            name=f"w{i:02d}",
            team="cms",
            gpus_per_pod=1,
            pods=draw(st.integers(1, 2)),
            created=NOW - timedelta(hours=1),
            pending_since=NOW - timedelta(hours=1),
            accelerator="A100",
            burstable=True,
            # Most past saving: a late attempt is what is left to them.
            deadline=draw(st.none() | st.integers(0, 90).map(lambda m: NOW + M * m)),
            expected_runtime=M * draw(st.sampled_from([10, 30, 120, 360])),
        )
        for i in range(draw(st.integers(2, 30)))
    )
    busy = OnPrem({"A100": 4}, (RunningWorkload("r", "A100", 4, NOW + timedelta(days=3)),))
    # A hard team budget nearly spent, or none: most late attempts cost more than it has left.
    left = draw(st.none() | st.integers(0, 400).map(lambda c: Money.of(Decimal(c) / 100, "USD")))
    budgets = () if left is None else (BudgetView("b-cms", "team", "cms", left, hard=True),)
    snap = Snapshot(workloads=ws, onprem=busy, pools=(pool, lent), budgets=budgets)
    return snap, draw(st.sampled_from(BACKLOGS))


# The A100 policy, on spot that is timed with restarts (a run's time grows faster than its
# runtime) and without; and on spot only for runs with slack for a restart.
BACKLOGS = [
    make_config(
        *(
            (
                name,
                {
                    **POLICY_VARIANTS[2],
                    "selector": {"namespaces": [name]},
                    "placement": {**POLICY_VARIANTS[2]["placement"], **more, "sharePools": share},
                },
            )
            for name in ("ml", "other")
        ),
        targets=[
            {**t, "spotInterruptionsPerHour": rate} if t["name"] == "azure-eastus" else t
            for t in TARGETS
        ],
    )
    for rate in (None, 0.5)
    for more in ({}, {"capacity": "spot-if-slack"})
    for share in (False, True)
]


# A shorter run that a remembered refusal would wrongly refuse turns up in about 3 % of these.
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(backlogs_at_the_pool_limit())
def test_a_backlog_at_the_pool_limit_is_planned_as_if_each_were_priced(
    scenario: tuple[Snapshot, Config],
) -> None:
    snap, cfg = scenario
    plan = _plan(snap, cfg)
    refusals_remembered_change_nothing(snap, cfg, plan)
    refusals_for_no_room_are_what_pricing_gives(snap, cfg, plan)
    refusals_for_a_spent_budget_are_what_pricing_gives(snap, cfg, plan)


@st.composite
def late_launches(draw: st.DrawFn) -> tuple[Snapshot, Config]:
    """A scenario whose pools all launch, most past their estimate, with half its workloads
    planned onto them and due around when they would end there."""
    snap, cfg = draw(scenarios())
    launching = snap.pools or (draw(pools("pool-late")),)
    late = tuple(
        replace(p, state="creating", created=NOW - M * draw(st.integers(0, 90))) for p in launching
    )
    ws = []
    for w in snap.workloads:
        if draw(st.booleans()):
            pool = draw(st.sampled_from(late))
            assert w.expected_runtime is not None
            w = replace(
                w,
                namespace=pool.policy,  # claimed by the pool's policy
                burstable=True,
                phase="planned",
                planned_pool=pool.name,
                deadline=NOW + w.expected_runtime + M * draw(st.integers(-30, 90)),
            )
        ws.append(w)
    return replace(snap, workloads=tuple(ws), pools=late), cfg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(late_launches())
def test_dispatches_planned_onto_pools_that_launch_late(scenario: tuple[Snapshot, Config]) -> None:
    _every_property_holds(*scenario)
