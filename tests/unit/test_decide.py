"""decide.plan() scenario by scenario, on the real shipped catalog.

Each case is a small story: the on-prem cluster, what is pending, the policy, and what a sensible
admin expects burst to do about it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest

from burst import decide
from burst.amounts import Money
from burst.cloud import catalog
from burst.config import Config
from burst.model import (
    BudgetView,
    CancelDispatch,
    CreatePool,
    DeletePool,
    Dispatch,
    OfferKey,
    OnPrem,
    OnPremNode,
    Plan,
    PoolView,
    ResizePool,
    RunningWorkload,
    Snapshot,
)
from tests.builders import NOW, TARGETS, make_config, policy_spec, workload

CATALOG = catalog.shipped()
H = timedelta(hours=1)
BUSY_V100 = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 8, NOW + 3 * H),))


@dataclass
class Case:
    id: str
    snapshot: Snapshot
    expect: Callable[[Plan], bool]
    config: Config = field(default_factory=make_config)


def dispatches(plan: Plan) -> dict[str, Dispatch]:
    return {a.workload: a for a in plan.actions if isinstance(a, Dispatch)}


def creates(plan: Plan) -> dict[str, CreatePool]:
    return {a.pool: a for a in plan.actions if isinstance(a, CreatePool)}


def skip_reason(plan: Plan, uid: str) -> str:
    return next(s.reason for s in plan.skips if s.workload == uid)


def offer_of(plan: Plan, uid: str) -> OfferKey:
    return creates(plan)[dispatches(plan)[uid].pool].offer


def _cheapest_v100_in_policy_targets(plan: Plan) -> bool:
    (d,) = dispatches(plan).values()
    offer = offer_of(plan, "w1")
    assert offer.accelerator == "V100" and offer.capacity == "on-demand"
    # Cheapest single-V100 node among aws eu-central-1, gcp europe-west4, azure eastus.
    best = min(
        (
            o
            for o in CATALOG.query(
                ["V100"],
                gpus=1,
                capacity="on-demand",
                regions={("aws", "eu-central-1"), ("gcp", "europe-west4"), ("azure", "eastus")},
            )
        ),
        key=lambda o: o.hourly.micros,
    )
    assert offer == best.key
    assert "deadline at risk: est. on-prem finish 14:00 > 12:00 - 30m margin" in d.reason
    return d.estimated_cost > Money.zero("USD")


# Spot only for runs delayed at most 5m by reclaims, on targets that know their reclaim rate.
SPOT_DELAY_5M = make_config(
    ("ml", policy_spec(placement={"capacity": "spot-if-slack", "maxSpotDelay": "5m"})),
    targets=[{**t, "spotInterruptionsPerHour": 0.05} for t in TARGETS],
)

CASES = [
    Case(
        "deadline-met-on-prem-stays",
        Snapshot(workloads=(workload(deadline=NOW + 6 * H),), onprem=BUSY_V100),
        lambda p: (
            not p.actions
            and skip_reason(p, "w1")
            == "deadline met on-prem: est. finish 14:00 <= 15:00 - 30m margin"
        ),
    ),
    Case(
        "deadline-at-risk-bursts-to-cheapest-feasible",
        Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100),
        _cheapest_v100_in_policy_targets,
    ),
    Case(
        "margin-counts-finish-at-deadline-minus-margin-is-at-risk",
        Snapshot(
            workloads=(workload(deadline=NOW + 5 * H + timedelta(minutes=29)),), onprem=BUSY_V100
        ),
        lambda p: "w1" in dispatches(p),
    ),
    Case(
        "max-wait-fires-without-deadline",
        Snapshot(workloads=(workload(pending_since=NOW - 7 * H),), onprem=BUSY_V100),
        lambda p: "pending 7h >= max wait 6h" in dispatches(p)["w1"].reason,
        make_config(("ml", policy_spec(trigger={"maxPendingWait": "6h"}))),
    ),
    Case(
        # Starburst's compute-wait: 1m per GPU-hour lets a 1-GPU run of 2 h wait 2 minutes.
        "wait-per-gpu-hour-sends-a-small-run-that-waited-its-share",
        Snapshot(workloads=(workload(),), onprem=BUSY_V100),
        lambda p: "pending 10m >= its wait of 1m per GPU-hour, 2m" in dispatches(p)["w1"].reason,
        make_config(("ml", policy_spec(trigger={"waitPerGpuHour": "1m"}))),
    ),
    Case(
        "wait-per-gpu-hour-keeps-a-big-run-that-has-not",  # 8 GPUs x 10 h: 80 minutes
        Snapshot(workloads=(workload(gpus_per_pod=8, expected_runtime=10 * H),), onprem=BUSY_V100),
        lambda p: "w1" not in dispatches(p),
        make_config(("ml", policy_spec(trigger={"waitPerGpuHour": "1m"}))),
    ),
    Case(
        "no-deadline-no-wait-trigger-stays",
        Snapshot(workloads=(workload(),), onprem=BUSY_V100),
        lambda p: skip_reason(p, "w1").startswith("no deadline; est. on-prem start 12:00"),
    ),
    Case(
        "quota-blocked-bursts-when-policy-allows",
        Snapshot(workloads=(workload(quota_blocked=True),), onprem=OnPrem({"V100": 8})),
        lambda p: "GPU quota of namespace ml exhausted" in dispatches(p)["w1"].reason,
        make_config(("ml", policy_spec(trigger={"quotaExhausted": True}))),
    ),
    Case(
        "quota-blocked-stays-when-policy-does-not-say",
        Snapshot(workloads=(workload(quota_blocked=True),), onprem=OnPrem({"V100": 8})),
        lambda p: "does not burst for quota" in skip_reason(p, "w1"),
    ),
    Case(
        "non-burstable-never-touched",
        Snapshot(workloads=(workload(burstable=False, deadline=NOW + H),), onprem=BUSY_V100),
        lambda p: not p.actions and not p.skips,
    ),
    Case(
        "burstable-but-no-policy-claims-it",
        Snapshot(workloads=(workload(namespace="default", deadline=NOW + H),), onprem=BUSY_V100),
        lambda p: (
            skip_reason(p, "w1") == "no BurstPolicy claims namespace default with these labels"
        ),
    ),
    Case(
        "too-big-for-on-prem-bursts",
        Snapshot(workloads=(workload(gpus_per_pod=8, pods=2),), onprem=OnPrem({"V100": 8})),
        lambda p: (
            "on-prem cannot run it: needs 16 V100, on-prem has 8" in dispatches(p)["w1"].reason
        ),
    ),
    Case(
        "a-pod-wider-than-every-node-bursts",
        Snapshot(
            workloads=(workload(gpus_per_pod=8),),
            onprem=OnPrem(
                {"V100": 8}, (), (OnPremNode("a", "V100", 4), OnPremNode("b", "V100", 4))
            ),
        ),
        lambda p: (
            "on-prem cannot run it: 1 pod(s) of 8 V100 do not fit its nodes (at most 4 on one)"
            in dispatches(p)["w1"].reason
        ),
    ),
    Case(
        "substitution-picks-cheaper-allowed-gpu",
        Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100),
        lambda p: offer_of(p, "w1").accelerator == "T4",
        make_config(("ml", policy_spec(placement={"accelerators": {"V100": ["V100", "T4"]}}))),
    ),
    Case(
        "deadline-too-close-for-any-cloud-and-on-prem-is-sooner",
        Snapshot(
            workloads=(workload(deadline=NOW + 2 * H + timedelta(minutes=5)),),
            onprem=OnPrem(
                {"V100": 8}, (RunningWorkload("r", "V100", 8, NOW + timedelta(minutes=5)),)
            ),
        ),
        lambda p: (
            "no cloud offer meets the deadline 11:05: earliest cloud finish 11:08"
            in skip_reason(p, "w1")
        ),
    ),
    Case(
        "deadline-lost-anyway-bursts-to-the-soonest-cloud-finish",
        Snapshot(
            workloads=(workload(deadline=NOW + 2 * H + timedelta(minutes=5)),), onprem=BUSY_V100
        ),
        lambda p: (
            "no cloud meets the deadline either, the soonest cloud finish 11:08 beats on-prem"
            in dispatches(p)["w1"].reason
        ),
    ),
    Case(
        "hard-budget-refuses",
        Snapshot(
            workloads=(workload(deadline=NOW + 3 * H),),
            onprem=BUSY_V100,
            budgets=(BudgetView("team-ml", "team", "ml", Money.of("1.00", "CHF")),),
        ),
        lambda p: "budget team-ml: 1.00 CHF left, needs" in skip_reason(p, "w1"),
        make_config(rates={"CHF": "0.80"}),
    ),
    Case(
        "soft-budget-only-warns",
        Snapshot(
            workloads=(workload(deadline=NOW + 3 * H),),
            onprem=BUSY_V100,
            budgets=(BudgetView("team-ml", "team", "ml", Money.of("1.00", "USD"), hard=False),),
        ),
        lambda p: "soft budget team-ml exceeded" in dispatches(p)["w1"].reason,
    ),
    Case(
        "job-max-cost-annotation-refuses",
        Snapshot(
            workloads=(workload(deadline=NOW + 3 * H, max_cost=Money.of("2", "USD")),),
            onprem=BUSY_V100,
        ),
        lambda p: "max cost 2.00 USD per job, needs" in skip_reason(p, "w1"),
    ),
    Case(
        "price-cap-leaves-nothing",
        Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100),
        lambda p: (
            "no offer with 1x1 V100 in the allowed targets within the policy's caps"
            in skip_reason(p, "w1")
        ),
        make_config(("ml", policy_spec(limits={"maxHourlyPrice": "0.50"}))),
    ),
    Case(
        "spot-if-slack-uses-spot-with-slack",
        Snapshot(workloads=(workload(deadline=NOW + 20 * H),), onprem=OnPrem({"V100": 0})),
        lambda p: offer_of(p, "w1").capacity == "spot",
        make_config(("ml", policy_spec(placement={"capacity": "spot-if-slack"}))),
    ),
    Case(
        # The same slack, but a copy of it was lost in a cloud: spot could cut it short again.
        "spot-if-slack-keeps-a-workload-that-lost-a-copy-on-demand",
        Snapshot(
            workloads=(workload(deadline=NOW + 20 * H, lost_copy=True),),
            onprem=OnPrem({"V100": 0}),
        ),
        lambda p: offer_of(p, "w1").capacity == "on-demand",
        make_config(("ml", policy_spec(placement={"capacity": "spot-if-slack"}))),
    ),
    Case(
        # The same slack, but a reclaim would fail the job (a PyTorchJob replica that never
        # restarts): on demand, where on-prem it would have run.
        "spot-if-slack-keeps-a-workload-a-reclaim-would-fail-on-demand",
        Snapshot(
            workloads=(workload(deadline=NOW + 20 * H, fails_on_reclaim=True),),
            onprem=OnPrem({"V100": 0}),
        ),
        lambda p: offer_of(p, "w1").capacity == "on-demand",
        make_config(("ml", policy_spec(placement={"capacity": "spot-if-slack"}))),
    ),
    Case(
        # A policy that allows only spot leaves no choice: it goes to spot again.
        "a-spot-only-policy-sends-a-workload-that-lost-a-copy-to-spot",
        Snapshot(
            workloads=(workload(deadline=NOW + 20 * H, lost_copy=True),),
            onprem=OnPrem({"V100": 0}),
        ),
        lambda p: offer_of(p, "w1").capacity == "spot",
        make_config(("ml", policy_spec(placement={"capacity": "spot"}))),
    ),
    Case(
        "spot-if-slack-keeps-on-demand-when-tight",
        Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=OnPrem({"V100": 0})),
        lambda p: offer_of(p, "w1").capacity == "on-demand",
        make_config(("ml", policy_spec(placement={"capacity": "spot-if-slack"}))),
    ),
    Case(
        "a-known-interruption-rate-keeps-a-long-wide-run-off-spot",
        # 8 pods of 8 GPUs for 30 h: at 0.05 interruptions per node-hour over 8 nodes, a run from
        # scratch expects e^12 restarts; on-demand it is.
        Snapshot(
            workloads=(
                workload(
                    deadline=NOW + 200 * H,
                    gpus_per_pod=8,
                    pods=8,
                    expected_runtime=30 * H,
                ),
            ),
            onprem=OnPrem({"V100": 0}),
        ),
        lambda p: offer_of(p, "w1").capacity == "on-demand",
        make_config(
            ("ml", policy_spec(placement={"capacity": "spot"})),
            targets=[{**t, "spotInterruptionsPerHour": 0.05} for t in TARGETS],
        ),
    ),
    Case(
        "a-known-interruption-rate-leaves-a-short-run-on-spot",
        Snapshot(workloads=(workload(deadline=NOW + 20 * H),), onprem=OnPrem({"V100": 0})),
        lambda p: offer_of(p, "w1").capacity == "spot",
        make_config(
            ("ml", policy_spec(placement={"capacity": "spot-if-slack"})),
            targets=[{**t, "spotInterruptionsPerHour": 0.05} for t in TARGETS],
        ),
    ),
    Case(
        # 10 h on spot at 0.05 interruptions an hour: e^0.5 - 1 = 0.65 restarts, about 3 h later.
        "max-spot-delay-keeps-a-long-run-on-demand",
        Snapshot(
            workloads=(workload(deadline=NOW + 200 * H, expected_runtime=10 * H),),
            onprem=OnPrem({"V100": 0}),
        ),
        lambda p: offer_of(p, "w1").capacity == "on-demand",
        SPOT_DELAY_5M,
    ),
    Case(
        # 1 h: 0.05 restarts, about two minutes later with the relaunch.
        "max-spot-delay-leaves-a-short-run-on-spot",
        Snapshot(
            workloads=(workload(deadline=NOW + 200 * H, expected_runtime=H),),
            onprem=OnPrem({"V100": 0}),
        ),
        lambda p: offer_of(p, "w1").capacity == "spot",
        SPOT_DELAY_5M,
    ),
    Case(
        "two-jobs-share-one-new-pool",
        Snapshot(
            workloads=(workload("a", deadline=NOW + 3 * H), workload("b", deadline=NOW + 3 * H)),
            onprem=BUSY_V100,
        ),
        lambda p: len(creates(p)) == 1 and dispatches(p)["a"].pool == dispatches(p)["b"].pool,
        make_config(("ml", policy_spec(placement={"targets": ["aws-euc1"]}))),
    ),
    Case(
        "pytorchjob-1-plus-3-on-multi-gpu-nodes",
        Snapshot(
            workloads=(workload(kind="PyTorchJob", gpus_per_pod=2, pods=4, deadline=NOW + 3 * H),),
            onprem=BUSY_V100,
        ),
        lambda p: sum(c.nodes * c.offer.gpus for c in creates(p).values()) >= 8,
    ),
    Case(
        "unavailable-offer-skipped-for-next-best",
        Snapshot(
            workloads=(workload(deadline=NOW + 3 * H),),
            onprem=BUSY_V100,
            unavailable=(
                CATALOG.query(
                    ["V100"], gpus=1, capacity="on-demand", regions={("gcp", "europe-west4")}
                )[0].key,
            ),
        ),
        lambda p: (
            offer_of(p, "w1")
            != CATALOG.query(
                ["V100"], gpus=1, capacity="on-demand", regions={("gcp", "europe-west4")}
            )[0].key
        ),
        make_config(("ml", policy_spec(placement={"targets": ["gcp-euw4"]}))),
    ),
    Case(
        "mig-slice-bursts-where-the-policy-maps-it",
        Snapshot(workloads=(workload(accelerator="mig-1g.5gb", quota_blocked=True),)),
        lambda p: offer_of(p, "w1").accelerator == "T4",
        make_config(
            (
                "ml",
                policy_spec(
                    trigger={"quotaExhausted": True},
                    placement={"accelerators": {"mig-1g.5gb": ["T4"]}},
                ),
            )
        ),
    ),
    Case(
        "mig-slice-without-a-mapping-stays",
        Snapshot(workloads=(workload(accelerator="mig-1g.5gb", quota_blocked=True),)),
        lambda p: "no offer with 1x1 mig-1g.5gb" in skip_reason(p, "w1"),
        make_config(("ml", policy_spec(trigger={"quotaExhausted": True}))),
    ),
    Case(
        "started-on-prem-cancels-planned-dispatch",
        Snapshot(workloads=(workload(phase="started", planned_pool="pool-1"),)),
        lambda p: (
            p.actions == (CancelDispatch("w1", "pool-1", "started on-prem before its dispatch"),)
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_scenario(case: Case) -> None:
    plan = decide.plan(case.snapshot, CATALOG, case.config, NOW)
    assert case.expect(plan), plan
    assert plan == decide.plan(case.snapshot, CATALOG, case.config, NOW)  # deterministic
    # Without the skips' reasons (the simulator's way) it decides the same.
    quiet = decide.plan(case.snapshot, CATALOG, case.config, NOW, skips=False)
    assert quiet.actions == plan.actions and quiet.skips == ()


def _pool(name: str = "aws-euc1-p3-8xlarge-od-1", **fields: object) -> PoolView:
    values: dict[str, object] = {
        "name": name,
        "target": "aws-euc1",
        "policy": "ml",
        "offer": OfferKey("aws", "eu-central-1", "p3.8xlarge", "on-demand", "V100", 4),
        "nodes": 1,
        "state": "ready",
        "created": NOW - H,
    }
    values.update(fields)
    return PoolView(**values)  # type: ignore[arg-type]


def test_reuses_a_pool_with_free_room_before_creating_one() -> None:
    snap = Snapshot(
        workloads=(workload(deadline=NOW + 3 * H),),
        onprem=BUSY_V100,
        pools=(_pool(free_gpus=(3,)),),
    )
    plan = decide.plan(snap, CATALOG, make_config(), NOW)
    assert [a.kind for a in plan.actions] == ["dispatch"]
    assert dispatches(plan)["w1"].pool == "aws-euc1-p3-8xlarge-od-1"
    assert "reuses pool aws-euc1-p3-8xlarge-od-1 with free room" in dispatches(plan)["w1"].reason


def test_a_silent_target_takes_no_work_neither_on_its_pools_nor_on_new_ones() -> None:
    """A pool with room on a target whose cluster does not answer could take the job, and a
    new pool there could be made: its copy could not. The plan goes elsewhere."""
    snap = Snapshot(
        workloads=(workload(deadline=NOW + 3 * H),),
        onprem=BUSY_V100,
        pools=(_pool(free_gpus=(3,)),),
    )
    heard = decide.plan(snap, CATALOG, make_config(), NOW)
    assert dispatches(heard)["w1"].target == "aws-euc1"
    silent = decide.plan(replace(snap, silent_targets=("aws-euc1",)), CATALOG, make_config(), NOW)
    assert dispatches(silent)["w1"].target != "aws-euc1"
    assert all(c.target != "aws-euc1" for c in creates(silent).values())
    # and the next plan that hears it again may use it again
    assert decide.plan(snap, CATALOG, make_config(), NOW) == heard


def test_a_hard_budget_is_asked_for_what_the_dispatch_will_hold() -> None:
    """A one-minute job on a pool with room costs its GPU's minute; its dispatch under a hard
    budget holds its run twice the budget horizon ahead (money/guard.first_hold). The plan asked
    the budget for the minute only, so with less left than the hold it planned a dispatch the
    budget then refused, pass after pass (the long soak's pools created and let go)."""
    short = workload(deadline=NOW + 3 * H, expected_runtime=timedelta(minutes=1))
    snap = Snapshot(workloads=(short,), onprem=BUSY_V100, pools=(_pool(free_gpus=(3,)),))
    cost = dispatches(decide.plan(snap, CATALOG, make_config(), NOW))["w1"].estimated_cost
    p3 = next(o for o in CATALOG if o.key == _pool().offer)
    horizon = make_config().service.spec.graces.budget_horizon  # type: ignore[union-attr]
    hold = math.ceil(p3.hourly.micros * 2 * horizon.total_seconds() / (4 * 3600))
    assert hold > cost.micros  # the case at hand
    for left, reused in ((hold - 1, False), (hold, True)):
        budget = BudgetView("ml", "team", "ml", Money(left, "USD"))
        plan = decide.plan(replace(snap, budgets=(budget,)), CATALOG, make_config(), NOW)
        sent = dispatches(plan).get("w1")
        # Short of the hold, not on that pool (a smaller node elsewhere holds less, if any).
        assert (sent is not None and sent.pool == _pool().name) is reused, left
    soft = BudgetView("ml", "team", "ml", Money(cost.micros, "USD"), hard=False)
    assert "w1" in dispatches(
        decide.plan(replace(snap, budgets=(soft,)), CATALOG, make_config(), NOW)
    )


def test_expected_run_restarts_from_scratch_at_each_interruption() -> None:
    rated, plain = (
        make_config(targets=[{**TARGETS[0], **extra}]).service
        for extra in ({"spotInterruptionsPerHour": 0.25}, {})
    )
    assert rated is not None and plain is not None
    aws = rated.spec.targets[0]
    # 2 nodes at 0.25 per node-hour: m = 0.5 per hour; a 2 h run: m T = 1, e - 1 restarts,
    # (e - 1) / 0.5 h of running.
    run, restarts = decide.expected_run(aws, "spot", 2, 2 * H)
    assert restarts == pytest.approx(math.e - 1)
    assert run.total_seconds() == pytest.approx((math.e - 1) / 0.5 * 3600)
    assert decide.expected_run(aws, "on-demand", 2, 2 * H) == (2 * H, 0.0)
    assert decide.expected_run(plain.spec.targets[0], "spot", 2, 2 * H) == (2 * H, 0.0)
    # A run of weeks on spot expects more restarts than a timedelta holds (e^30 / m hours): the
    # pass failed with OverflowError (a noisy runtime guess in the simulator found it). It is
    # never expected to end: as long as a decade, the longest any runtime may be.
    run, restarts = decide.expected_run(aws, "spot", 2, timedelta(days=60))
    assert run == timedelta(days=3650) and restarts * aws.provisioning  # no overflow either


def test_a_launch_past_its_estimate_is_not_trusted_with_a_tight_deadline() -> None:
    # aws-euc1 pools take 10 min. One created 5 min ago is expected at 09:05: a 2 h job on it
    # finishes 11:05, in time. One created an hour ago is in the latency tail: expected another
    # 10 min (11:10, late), so the job goes to the soonest new pool (gcp, 8 min) instead.
    deadline = NOW + 2 * H + timedelta(minutes=5)
    fresh = _pool(state="creating", created=NOW - timedelta(minutes=5), free_gpus=(4,))
    snap = Snapshot(workloads=(workload(deadline=deadline),), onprem=BUSY_V100, pools=(fresh,))
    assert dispatches(decide.plan(snap, CATALOG, make_config(), NOW))["w1"].pool == fresh.name
    late = replace(fresh, created=NOW - H)
    snap = replace(snap, pools=(late,))
    dispatch = dispatches(decide.plan(snap, CATALOG, make_config(), NOW))["w1"]
    assert dispatch.pool != late.name and dispatch.target.startswith("gcp")
    assert "no cloud meets the deadline either" in dispatch.reason


def test_a_dispatch_planned_onto_a_pool_that_launches_late_is_placed_again_if_sooner() -> None:
    # As above: the aws pool created an hour ago is expected at 09:10, so w1 planned onto it
    # would finish at 11:10, after its deadline (11:09). A new gcp pool finishes it at 11:08:
    # its dispatch is cancelled first, and made again there. Nothing more goes onto the late
    # pool meanwhile (w2 would fit in its room).
    deadline = NOW + 2 * H + timedelta(minutes=9)
    late = _pool(state="creating", created=NOW - H, free_gpus=(3,))
    w1 = workload(deadline=deadline, phase="planned", planned_pool=late.name)
    w2 = workload("w2", deadline=NOW + 2 * H + timedelta(minutes=50))
    snap = Snapshot(workloads=(w1, w2), onprem=BUSY_V100, pools=(late,))
    plan = decide.plan(snap, CATALOG, make_config(), NOW)
    cancel = plan.actions[0]
    assert isinstance(cancel, CancelDispatch) and (cancel.workload, cancel.pool) == (
        "w1",
        late.name,
    )
    assert "its pool aws-euc1-p3-8xlarge-od-1 is late to launch" in cancel.reason
    assert dispatches(plan)["w1"].target.startswith("gcp")
    assert dispatches(plan)["w2"].pool != late.name
    # Launched 5 minutes ago, it is expected on time (09:05): w1 stays planned there, and w2
    # takes the pool's room.
    fresh = replace(late, created=NOW - timedelta(minutes=5))
    w1 = replace(w1, deadline=NOW + 2 * H + timedelta(minutes=40))
    plan = decide.plan(
        replace(snap, workloads=(w1, w2), pools=(fresh,)), CATALOG, make_config(), NOW
    )
    assert "w1" not in dispatches(plan) and dispatches(plan)["w2"].pool == fresh.name
    assert not [a for a in plan.actions if isinstance(a, CancelDispatch)]


def test_a_plan_says_from_when_room_freed_alone_may_let_the_next_do_more() -> None:
    # What the simulator plans a cloud job's end by (Plan.more_from): never, when nothing waits
    # to burst; from when a pool with work planned onto it passes its launch estimate (10 m on
    # aws-euc1), when the work may be moved; at once, when a workload that wants to burst is
    # left waiting.
    fresh = _pool(state="creating", created=NOW - timedelta(minutes=5), free_gpus=(3,))
    planned = workload(deadline=NOW + 3 * H, phase="planned", planned_pool=fresh.name)
    safe = workload("w2", deadline=NOW + 30 * H)  # on-prem in 3 h: no trigger
    snap = Snapshot(workloads=(safe,), onprem=BUSY_V100)
    assert decide.plan(snap, CATALOG, make_config(), NOW).more_from is None
    snap = replace(snap, workloads=(planned, safe), pools=(fresh,))
    plan = decide.plan(snap, CATALOG, make_config(), NOW)
    assert plan.more_from == NOW + timedelta(minutes=5)
    refused = workload("w3", deadline=NOW + 3 * H)  # at risk on-prem; the one pool is full
    snap = Snapshot(workloads=(refused,), onprem=BUSY_V100, pools=(_pool(free_gpus=(0,)),))
    plan = decide.plan(snap, CATALOG, _one_pool_of_one_node(), NOW, skips=False)
    assert not plan.actions and plan.more_from == NOW


def test_a_workload_planned_onto_a_launching_pool_holds_a_strict_queue_until_it_is_up() -> None:
    # StrictFIFO on one node of 8 V100s, 6 held until 12:00. w1 (4 GPUs, first in line) is
    # planned onto an aws-euc1 pool asked for now, up at 09:10: until then it stays queued
    # on-prem (the service copies it once the pool is up and takes it out of the queue then), and
    # a strict queue starts nothing behind it (sim/clouds.py, as Kueue's StrictFIFO). w2 (2 GPUs,
    # 2 h, due 11:35 less the 30 min margin) fits now but starts at 09:10, finishing at 11:10:
    # at risk. Were w1's pool up, w2 would start now and finish at 11:00: in time.
    onprem = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 6, NOW + 3 * H),))
    launching = _pool(state="creating", created=NOW)
    w1 = workload(gpus_per_pod=4, created=NOW - H, phase="planned", planned_pool=launching.name)
    w2 = workload("w2", gpus_per_pod=2, deadline=NOW + 2 * H + timedelta(minutes=35))
    snap = Snapshot(workloads=(w1, w2), onprem=onprem, pools=(launching,))
    assert "w2" in dispatches(decide.plan(snap, CATALOG, make_config(), NOW))
    up = replace(launching, state="ready")
    plan = decide.plan(replace(snap, pools=(up,)), CATALOG, make_config(), NOW)
    assert "w2" not in dispatches(plan)
    assert skip_reason(plan, "w2").startswith("deadline met on-prem")
    # One that would start on-prem before its pool is up starts there (its dispatch is then
    # cancelled) and holds nothing past that: with 4 GPUs free now, w1 and w2 both start now.
    free = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 2, NOW + 3 * H),))
    plan = decide.plan(replace(snap, onprem=free), CATALOG, make_config(), NOW)
    assert "w2" not in dispatches(plan)


def test_a_workload_planned_onto_a_launching_pool_takes_room_first_in_a_best_effort_queue() -> None:
    # BestEffortFIFO on one node of 8 V100s: 6 held until 12:00, 2 until 09:05. w1 (2 GPUs, 2 h,
    # first in line) is planned onto an aws-euc1 pool asked for now, up at 09:10: until then it
    # is still queued on-prem, and the GPUs freed at 09:05 go to it, first in line (its dispatch
    # is then cancelled; sim/queue.py, as Kueue's BestEffortFIFO). w2 (2 GPUs, 2 h, due 11:50
    # less the 30 min margin) then starts when w1 ends, at 11:05, and finishes at 13:05: at risk.
    # Were w1's pool up, w2 would start at 09:05 and finish at 11:05: in time.
    onprem = OnPrem(
        {"V100": 8},
        (
            RunningWorkload("r", "V100", 6, NOW + 3 * H),
            RunningWorkload("s", "V100", 2, NOW + timedelta(minutes=5)),
        ),
    )
    launching = _pool(state="creating", created=NOW)
    w1 = workload(gpus_per_pod=2, created=NOW - H, phase="planned", planned_pool=launching.name)
    w2 = workload("w2", gpus_per_pod=2, deadline=NOW + 2 * H + timedelta(minutes=50))
    snap = Snapshot(workloads=(w1, w2), onprem=onprem, pools=(launching,))
    cfg = make_config(queueing="BestEffortFIFO")
    assert "w2" in dispatches(decide.plan(snap, CATALOG, cfg, NOW))
    up = replace(launching, state="ready")
    plan = decide.plan(replace(snap, pools=(up,)), CATALOG, cfg, NOW)
    assert skip_reason(plan, "w2").startswith("deadline met on-prem")
    # Room that frees only once its pool is up (09:15) is not w1's: it has left the queue for
    # its pool, and w2 starts then, finishing at 11:15, in time.
    later = replace(
        onprem,
        running=(
            onprem.running[0],
            replace(onprem.running[1], expected_end=NOW + timedelta(minutes=15)),
        ),
    )
    plan = decide.plan(replace(snap, onprem=later), CATALOG, cfg, NOW)
    assert skip_reason(plan, "w2").startswith("deadline met on-prem")


def test_a_placement_whose_trigger_is_gone_once_the_refused_stay_is_priced_again() -> None:
    # BestEffortFIFO, 16 A100s, 12 held until 11:00 tomorrow. Queue: "hog" (4 x 1 GPU, 19 h, due
    # 09:03, of a policy whose price cap no offer meets), "wide" (2 x 8, 2 h, not burstable), w1
    # (3 x 2, 5 min, due 11:40 tomorrow less 30 min), "filler" (2 x 2, 7.5 h, not burstable).
    # In the first round the hog wants to burst and leaves the run: the filler takes the 4 free
    # GPUs until 16:30, wide all 16 at 11:00 tomorrow, and w1 would finish at 13:05: at risk, so
    # it is placed. The hog is refused and stays: it holds the 4 GPUs until 04:00, the filler
    # then until 11:30, so at 11:00 wide does not fit and w1 does: it would finish on-prem at
    # 11:05, in time. Only the price on waiting still sends it, and what that is worth caps its
    # cost: it is placed again for that reason, not for a deadline it no longer misses.
    day = 26 * H
    onprem = OnPrem({"A100": 16}, (RunningWorkload("r", "A100", 12, NOW + day),))
    ml = policy_spec(trigger={"deadlineSafetyMargin": "30m", "waitPrice": "0.50"})
    capped = policy_spec(selector={"namespaces": ["other"]}, limits={"maxHourlyPrice": "0.01"})
    cfg = make_config(("ml", ml), ("other", capped), queueing="BestEffortFIFO")
    a100 = {"accelerator": "A100", "created": NOW - timedelta(minutes=1)}
    hog = workload(
        "hog",
        namespace="other",
        pods=4,
        priority=1,
        deadline=NOW + timedelta(minutes=3),
        expected_runtime=19 * H,
        **a100,
    )
    wide = workload("wide", gpus_per_pod=8, pods=2, priority=1, burstable=False, **a100)
    w1 = workload(
        gpus_per_pod=2,
        pods=3,
        deadline=NOW + day + timedelta(minutes=40),
        expected_runtime=timedelta(minutes=5),
        **a100,
    )
    filler = workload(
        "filler",
        gpus_per_pod=2,
        pods=2,
        burstable=False,
        expected_runtime=7.5 * H,
        accelerator="A100",
    )
    snap = Snapshot(workloads=(hog, wide, w1, filler), onprem=onprem)
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    assert "hog" not in dispatches(plan)
    assert "sooner, worth" in dispatches(plan)["w1"].reason


def test_a_late_dispatch_that_still_meets_its_deadline_there_stays() -> None:
    # The late aws pool would end a 2 h run at 11:10, inside the 30 min margin of an 11:15
    # deadline but before it: as a new pool is asked to, so it is not moved (a new gcp pool,
    # 11:08, would cost a launch for nothing).
    late = _pool(state="creating", created=NOW - H, free_gpus=(3,))
    w1 = workload(
        deadline=NOW + 2 * H + timedelta(minutes=15), phase="planned", planned_pool=late.name
    )
    snap = Snapshot(workloads=(w1,), onprem=BUSY_V100, pools=(late,))
    assert decide.plan(snap, CATALOG, make_config(), NOW).actions == ()


def test_a_late_dispatch_whose_deadline_no_cloud_meets_stays_where_it_is() -> None:
    # Due at 11:00 after a 2 h run: a new gcp pool would end it at 11:08, two minutes before the
    # late aws pool is now expected to (11:10), but late either way. A new pool to finish a lost
    # deadline two minutes sooner, while the late one launches on, is not made.
    late = _pool(state="creating", created=NOW - H, free_gpus=(3,))
    w1 = workload(deadline=NOW + 2 * H, phase="planned", planned_pool=late.name)
    snap = Snapshot(workloads=(w1,), onprem=BUSY_V100, pools=(late,))
    assert decide.plan(snap, CATALOG, make_config(), NOW).actions == ()


def test_a_late_spot_pool_that_leaves_no_slack_for_a_restart_moves_its_dispatch_on_demand() -> None:
    # spot-if-slack placed w1 on spot with room for one restart. The pool is late: started at
    # 09:10, a 1 h run ends 10:10, in time, but a reclaim and a restart (10 min, 1 h) would end
    # 11:20, after 11:40 less the 30 min margin. On demand it is placed again, in time.
    cfg = make_config(("ml", policy_spec(placement={"capacity": "spot-if-slack"})))
    offer = OfferKey("aws", "eu-central-1", "p3.8xlarge", "spot", "V100", 4)
    late = _pool("aws-euc1-p3-8xlarge-spot-1", offer=offer, state="creating", created=NOW - H)
    w1 = workload(
        deadline=NOW + 2 * H + timedelta(minutes=40),
        expected_runtime=H,
        phase="planned",
        planned_pool=late.name,
    )
    plan = decide.plan(
        Snapshot(workloads=(w1,), onprem=BUSY_V100, pools=(late,)), CATALOG, cfg, NOW
    )
    assert isinstance(plan.actions[0], CancelDispatch)
    assert offer_of(plan, "w1").capacity == "on-demand"


def test_grows_an_existing_pool_of_the_chosen_offer() -> None:
    cfg = make_config(
        ("ml", policy_spec(placement={"targets": ["aws-euc1"]}, limits={"maxPools": 1}))
    )
    full = _pool(
        "aws-euc1-p3-2xlarge-od-1",
        offer=OfferKey("aws", "eu-central-1", "p3.2xlarge", "on-demand", "V100", 1),
        free_gpus=(0,),
    )
    snap = Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100, pools=(full,))
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    resize = [a for a in plan.actions if isinstance(a, ResizePool)]
    assert resize and resize[0].pool == full.name and resize[0].nodes == 2, plan
    assert dispatches(plan)["w1"].pool == full.name


def test_a_reuse_that_keeps_a_node_up_for_it_alone_loses_to_a_pool_of_its_own() -> None:
    # One of the 4-GPU node's GPUs is free and its work ends in 10 minutes: the 2-hour workload
    # there would keep all four GPUs up for 1 h 50 m more (22 USD at 12.24 an hour), where a
    # 1-GPU node costs its launch, run and tail (about 7 USD). Small jobs in the room of big
    # nodes were most of a Philly replay's idle spend.
    pool = _pool(free_gpus=(1,), busy_until=(NOW + timedelta(minutes=10),))
    snap = Snapshot(workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=(pool,))
    placed = dispatches(decide.plan(snap, CATALOG, make_config(), NOW))["w1"]
    assert placed.pool != pool.name and "n1-standard-1" in placed.reason, placed  # 1 V100
    # Within the work already there the GPU adds no node time: it is reused.
    for told in ((NOW + 3 * H,), ()):  # ... as is a pool whose work's end nobody knows
        snap = replace(snap, pools=(replace(pool, busy_until=told),))
        assert dispatches(decide.plan(snap, CATALOG, make_config(), NOW))["w1"].pool == pool.name


def test_a_learned_run_is_weighed_in_the_room_of_a_big_node_at_the_longest_run_like_it() -> None:
    # The node's work ends in 3 hours; the 2-hour estimate ends before it, but runs like this
    # one have taken up to 8 hours: then the run keeps the 4-GPU node up 5 hours for itself
    # alone (61 USD at 12.24 an hour), where a 1-GPU node of its own costs about 25 for as long.
    # Runs past their estimates in big nodes' room were most of a Philly replay's idle spend.
    pool = _pool(free_gpus=(1,), busy_until=(NOW + 3 * H,))
    placed = {}
    for longest in (None, 150, 480):  # minutes: unknown, within the node's work, past it
        w = workload(
            deadline=NOW + 4 * H,
            longest_runtime=None if longest is None else timedelta(minutes=longest),
        )
        snap = Snapshot(workloads=(w,), onprem=BUSY_V100, pools=(pool,))
        placed[longest] = dispatches(decide.plan(snap, CATALOG, make_config(), NOW))["w1"]
    assert placed[None].pool == placed[150].pool == pool.name
    assert placed[480].pool != pool.name and "n1-standard-1" in placed[480].reason, placed[480]
    assert placed[480].estimated_finish == placed[None].estimated_finish + timedelta(minutes=8)


def test_at_the_pool_limit_a_reuse_that_keeps_a_node_up_for_it_alone_loses_to_a_growth() -> None:
    # As a pool of its own below the limit: the 2-hour run in the 4-GPU node whose work ends in
    # 10 minutes keeps it up 1 h 50 m more (22 USD), where growing the full 1-GPU pool by a node
    # costs about 7. At the limit such room was taken whatever it kept up.
    big = _pool(free_gpus=(1,), busy_until=(NOW + timedelta(minutes=10),))
    small = _pool(
        "gcp-euw4-n1-standard-1-1xv100-od-1",
        target="gcp-euw4",
        offer=OfferKey("gcp", "europe-west4", "n1-standard-1", "on-demand", "V100", 1),
        free_gpus=(0,),
        busy_until=(NOW + 3 * H,),
    )
    cfg = make_config(("ml", policy_spec(limits={"maxPools": 2})))
    placed = {}
    for ends in (timedelta(minutes=10), 3 * H):
        pools = (replace(big, busy_until=(NOW + ends,)), small)
        snap = Snapshot(workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=pools)
        placed[ends] = dispatches(decide.plan(snap, CATALOG, cfg, NOW))["w1"]
    assert placed[timedelta(minutes=10)].pool == small.name
    assert "grows pool" in placed[timedelta(minutes=10)].reason
    assert placed[3 * H].pool == big.name  # within the work there it adds no node time


def test_work_planned_onto_a_launching_pool_ends_a_runtime_after_the_pool_is_up() -> None:
    # The service tells work planned onto a pool still launching as ending its runtime from now
    # (its copy has not started: service/loop.py), but it starts when the pool is up, here in 40
    # minutes. Three of the node's four V100 hold work of 1 h 45 m: it ends at +2 h 25 m, and a
    # 2-hour run in the fourth GPU (+40 m to +2 h 40 m) keeps the node up 15 minutes more (about
    # 3 USD), less than a node of its own (about 7). Taken as ending at +1 h 45 m, the work there
    # seemed to leave the run 55 minutes alone on the node (11 USD): a pool of its own.
    targets = [
        {**t, "provisioningEstimate": "40m"} if t["name"] == "aws-euc1" else t for t in TARGETS
    ]
    launching = _pool(
        state="requested",
        created=NOW,
        free_gpus=(1,),
        busy_until=(NOW + timedelta(minutes=105),),
    )
    snap = Snapshot(
        workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=(launching,)
    )
    cfg = make_config(targets=targets)
    placed = dispatches(decide.plan(snap, CATALOG, cfg, NOW))["w1"]
    assert placed.pool == launching.name, placed
    assert placed.estimated_finish == NOW + timedelta(minutes=40) + 2 * H


def test_a_price_on_waiting_weighs_how_much_sooner_each_place_finishes() -> None:
    # As above: the reuse adds 1 h 50 m of a 4-GPU node (about 22 USD), a 1-GPU node of its own
    # about 7 USD but it finishes 8 minutes later (gcp-euw4's launch). At a price on waiting of
    # 200 USD per GPU-hour those 8 minutes are worth 26.67 USD: the pool that is up takes it. At
    # 50 they are worth 6.67 USD, less than the 15 USD between them: a pool of its own.
    pool = _pool(free_gpus=(1,), busy_until=(NOW + timedelta(minutes=10),))
    snap = Snapshot(workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=(pool,))
    placed = {}
    for price in ("50", "200"):
        trigger = {"deadlineSafetyMargin": "30m", "waitPrice": price}
        cfg = make_config(("ml", policy_spec(trigger=trigger)))
        placed[price] = dispatches(decide.plan(snap, CATALOG, cfg, NOW))["w1"]
    assert placed["50"].pool != pool.name and "n1-standard-1" in placed["50"].reason
    assert placed["200"].pool == pool.name
    assert placed["200"].estimated_finish < placed["50"].estimated_finish


def test_a_price_on_waiting_weighs_which_pool_with_room_finishes_sooner() -> None:
    # Two pools with room that each keep a node up past the run anyway: a cheaper one still
    # launching on gcp-euw4 (2.71 USD a V100-hour, up in 8 minutes) and a dearer one that is up
    # (3.82). The run of 2 h costs 2.23 USD less on the first and finishes 8 minutes later: worth
    # 0.13 USD at a price on waiting of 1 USD per GPU-hour, 13.33 USD at 100.
    busy = (NOW + 4 * H,)
    launching = _pool(
        "gcp-euw4-n1-standard-8-4xv100-od-1",
        target="gcp-euw4",
        offer=OfferKey("gcp", "europe-west4", "n1-standard-8", "on-demand", "V100", 4),
        state="requested",
        created=NOW,
        free_gpus=(3,),
        busy_until=busy,
    )
    up = _pool(free_gpus=(3,), busy_until=busy)
    snap = Snapshot(
        workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=(launching, up)
    )
    placed = {}
    for price in (None, "1", "100"):
        trigger = {"deadlineSafetyMargin": "30m"} | ({"waitPrice": price} if price else {})
        cfg = make_config(("ml", policy_spec(trigger=trigger)))
        placed[price] = dispatches(decide.plan(snap, CATALOG, cfg, NOW))["w1"]
    assert placed[None].pool == placed["1"].pool == launching.name
    assert placed["100"].pool == up.name
    assert placed["100"].estimated_finish == placed["1"].estimated_finish - timedelta(minutes=8)


def test_a_price_on_waiting_counts_the_time_room_on_a_pool_that_is_up_saves() -> None:
    # On-prem frees its GPUs in 5 minutes, sooner than any target launches a node (8-12), but a
    # pool that is up has room now: the 2-hour run there finishes 5 minutes sooner, worth 16.67
    # USD at 200 USD per GPU-hour, against 7.65 for its share of the node. Counting only new
    # pools, no cloud looked sooner and it stayed.
    onprem = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 8, NOW + timedelta(minutes=5)),))
    up = _pool(free_gpus=(3,), busy_until=(NOW + 4 * H,))
    snap = Snapshot(workloads=(workload(),), onprem=onprem, pools=(up,))
    placed = {}
    for price in (None, "1", "200"):
        trigger = {"deadlineSafetyMargin": "30m"} | ({"waitPrice": price} if price else {})
        cfg = make_config(("ml", policy_spec(trigger=trigger)))
        placed[price] = dispatches(decide.plan(snap, CATALOG, cfg, NOW)).get("w1")
    assert placed[None] is None and placed["1"] is None  # worth 0.08 USD at 1: it stays
    assert placed["200"] is not None and placed["200"].pool == up.name
    assert placed["200"].estimated_finish == NOW + 2 * H
    assert "a cloud finishes it 5m sooner" in placed["200"].reason


def test_at_the_pool_limit_a_price_on_waiting_weighs_which_pool_grown_finishes_sooner() -> None:
    # Two full pools at the limit of two, each to grow by a node for a 1-GPU run of 2 h: on
    # gcp-euw4 (10.83 USD a node-hour, a launch of 40 minutes here) or on aws-euc1 (15.29, 10
    # minutes). The first costs 4.99 USD less for the launch, run and idle TTL, and finishes 30
    # minutes later: worth 0.50 USD at a price on waiting of 1 USD per GPU-hour, 50 at 100.
    targets = [
        {**t, "provisioningEstimate": "40m"} if t["name"] == "gcp-euw4" else t for t in TARGETS
    ]
    slow = _pool(
        "gcp-euw4-n1-standard-8-4xv100-od-1",
        target="gcp-euw4",
        offer=OfferKey("gcp", "europe-west4", "n1-standard-8", "on-demand", "V100", 4),
        free_gpus=(0,),
    )
    fast = _pool(free_gpus=(0,))
    snap = Snapshot(
        workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=(slow, fast)
    )
    placed = {}
    for price in (None, "1", "100"):
        trigger = {"deadlineSafetyMargin": "30m"} | ({"waitPrice": price} if price else {})
        spec = policy_spec(trigger=trigger, limits={"maxPools": 2})
        cfg = make_config(("ml", spec), targets=targets)
        placed[price] = dispatches(decide.plan(snap, CATALOG, cfg, NOW))["w1"]
    assert placed[None].pool == placed["1"].pool == slow.name
    assert "grows pool" in placed["1"].reason
    assert placed["100"].pool == fast.name
    assert placed["100"].estimated_finish == placed["1"].estimated_finish - timedelta(minutes=30)


def _one_pool_of_one_node(
    trigger: dict[str, str] | None = None, queueing: str = "StrictFIFO"
) -> Config:
    """Policy `ml`: room for one pool of one node on aws-euc1, and `trigger` if given."""
    more = {"trigger": trigger} if trigger else {}
    spec = policy_spec(
        placement={"targets": ["aws-euc1"]}, limits={"maxPools": 1, "maxNodesPerPool": 1}, **more
    )
    return make_config(("ml", spec), queueing=queueing)


def test_max_pools_refuses_a_new_pool() -> None:
    cfg = _one_pool_of_one_node()
    full = _pool(free_gpus=(0,))
    snap = Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100, pools=(full,))
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    assert "policy ml: max 1 pools reached" in skip_reason(plan, "w1")


def test_at_the_pool_limit_a_full_sized_pool_with_room_still_takes_work_with_or_without_reasons() -> (
    None
):
    # The policy is at its limits (1 pool of 1 node), but its node has GPUs free: the workload
    # goes there. A replay, which asks for no reasons, skips a policy with no room at all before
    # pricing anything: it must not take this one for full.
    cfg = _one_pool_of_one_node()
    roomy = _pool(free_gpus=(7,))
    snap = Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100, pools=(roomy,))
    for skips in (True, False):
        plan = decide.plan(snap, CATALOG, cfg, NOW, skips=skips)
        assert dispatches(plan)["w1"].pool == roomy.name
    full = _pool(free_gpus=(0,))
    snap = replace(snap, pools=(full,))
    assert not dispatches(decide.plan(snap, CATALOG, cfg, NOW, skips=False))


def test_at_the_pool_limit_a_deadline_no_run_can_meet_is_placed_late_or_refused_at_the_limit() -> (
    None
):
    # Its deadline is nearer than its run is long: no pool finishes it in time, which at the pool
    # limit is refused unpriced. The late placement still goes into the room there is, when the
    # soonest cloud finish beats on-prem's; when on-prem is sooner, it waits with the reason the
    # pricing gives.
    cfg = _one_pool_of_one_node()
    roomy = _pool(free_gpus=(1,))
    late = workload(deadline=NOW + timedelta(minutes=30), expected_runtime=H)
    snap = Snapshot(workloads=(late,), onprem=BUSY_V100, pools=(roomy,))  # on-prem: in 3 h
    placed = dispatches(decide.plan(snap, CATALOG, cfg, NOW))["w1"]
    assert placed.pool == roomy.name and "no cloud meets the deadline either" in placed.reason
    soon = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 8, NOW + timedelta(minutes=5)),))
    plan = decide.plan(replace(snap, onprem=soon), CATALOG, cfg, NOW)
    assert not dispatches(plan) and skip_reason(plan, "w1").endswith(
        "policy ml: max 1 pools reached"
    )


def _one_pool_and_a_wait_trigger(queueing: str = "StrictFIFO") -> Config:
    """Policy `ml`: a 2-hour wait trigger, and room for one pool of one node on aws-euc1."""
    return _one_pool_of_one_node({"maxPendingWait": "2h"}, queueing)


def test_a_backlog_past_its_wait_trigger_sends_its_most_urgent_into_the_last_room() -> None:
    """Hundreds wait past the wait trigger and the policy's one pool has a GPU free. A replay's
    plan (no reasons) asks the trigger of those the wait sends only when placed, and refuses the
    rest unlooked at once no policy has room: it must place the one an explained plan places, the
    most urgent (least slack), with the same reason."""
    cfg = _one_pool_and_a_wait_trigger()
    backlog = tuple(
        workload(
            f"w{i:03}",
            created=NOW - 3 * H - i * timedelta(minutes=1),
            pending_since=NOW - 3 * H - i * timedelta(minutes=1),
            deadline=NOW + (20 + (i * 37) % 200) * H,
            expected_runtime=H,
        )
        for i in range(300)
    )
    snap = Snapshot(workloads=backlog, onprem=BUSY_V100, pools=(_pool(free_gpus=(1,)),))
    explained = decide.plan(snap, CATALOG, cfg, NOW)
    quiet = decide.plan(snap, CATALOG, cfg, NOW, skips=False)
    most_urgent = min(backlog, key=lambda w: (w.deadline, w.created))
    assert list(dispatches(explained)) == [most_urgent.uid]
    assert quiet.actions == explained.actions
    assert ">= max wait 2h; reuses pool" in dispatches(quiet)[most_urgent.uid].reason
    refused = [s for s in explained.skips if "max 1 pools reached" in s.reason]
    assert len(refused) == len(backlog) - 1


def test_a_pool_still_being_deleted_counts_against_max_pools() -> None:
    # Its nodes run until the cloud has deleted it: a new pool beside it would be one too many.
    cfg = make_config(
        ("ml", policy_spec(placement={"targets": ["aws-euc1"]}, limits={"maxPools": 1}))
    )
    going = _pool(state="deleting", free_gpus=(8,))
    snap = Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100, pools=(going,))
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    assert not dispatches(plan) and "policy ml: max 1 pools reached" in skip_reason(plan, "w1")
    # Gone in the cloud, it no longer counts.
    plan = decide.plan(replace(snap, pools=(replace(going, state="deleted"),)), CATALOG, cfg, NOW)
    assert "w1" in dispatches(plan)


def test_idle_pool_past_ttl_and_old_pool_are_deleted() -> None:
    idle = _pool("idle", idle_since=NOW - timedelta(minutes=11))
    old = _pool("old", created=NOW - 25 * H, idle_since=NOW - timedelta(minutes=1))
    fresh = _pool("fresh", idle_since=NOW - timedelta(minutes=3))
    plan = decide.plan(Snapshot(pools=(idle, old, fresh)), CATALOG, make_config(), NOW)
    deleted = {a.pool: a.reason for a in plan.actions if isinstance(a, DeletePool)}
    assert deleted == {
        "idle": "idle 11m >= idle TTL 10m",
        "old": "max lifetime 1d reached, and nothing runs on it",
    }


def test_a_pool_past_its_lifetime_drains_its_work_and_takes_no_more() -> None:
    # Work still runs on `old` (no idle_since): it is not cut off, but with no known end to that
    # work a new job gets a new pool.
    old = _pool("old", created=NOW - 25 * H, free_gpus=(7,))
    snap = Snapshot(workloads=(workload(deadline=NOW + 3 * H),), onprem=BUSY_V100, pools=(old,))
    plan = decide.plan(snap, CATALOG, make_config(), NOW)
    assert not [a for a in plan.actions if isinstance(a, DeletePool)]
    (dispatch,) = [a for a in plan.actions if isinstance(a, Dispatch)]
    assert dispatch.pool != "old"


def test_a_pool_past_its_lifetime_takes_work_that_ends_before_its_own() -> None:
    # maxPools 1, and the one pool is past its lifetime: one node of 4 V100 with 1 free, its run
    # ending in 10 h. A 2 h job takes its free GPU: it ends before that run does and so keeps the
    # pool up no longer, while the pool's slot is held anyway. A 12 h job would keep it up 2 h
    # more: refused at the limit. Under the limit the old pool's room takes the short job too
    # (it is up that long anyway), but the pool is grown only at the limit.
    cfg = make_config(
        ("ml", policy_spec(placement={"targets": ["aws-euc1"]}, limits={"maxPools": 1}))
    )
    old = _pool("old", created=NOW - 25 * H, free_gpus=(1,), busy_until=(NOW + 10 * H,))
    short = workload("short", deadline=NOW + 3 * H)
    long = workload("long", deadline=NOW + 13 * H, expected_runtime=12 * H)
    plan = decide.plan(
        Snapshot(workloads=(short,), onprem=BUSY_V100, pools=(old,)), CATALOG, cfg, NOW
    )
    assert dispatches(plan)["short"].pool == "old"
    assert "reuses pool old, past its lifetime: the run ends before the work it drains" in (
        dispatches(plan)["short"].reason
    )
    plan = decide.plan(
        Snapshot(workloads=(long,), onprem=BUSY_V100, pools=(old,)), CATALOG, cfg, NOW
    )
    assert not dispatches(plan) and "policy ml: max 1 pools reached" in skip_reason(plan, "long")
    # Full, it grows by a node for the short job, and the plan says so.
    full = replace(old, free_gpus=(0,))
    plan = decide.plan(
        Snapshot(workloads=(short,), onprem=BUSY_V100, pools=(full,)), CATALOG, cfg, NOW
    )
    (resize,) = [a for a in plan.actions if isinstance(a, ResizePool)]
    assert (resize.pool, resize.nodes, dispatches(plan)["short"].pool) == ("old", 2, "old")
    # With room for a second pool, the short job takes the old pool's free GPU all the same;
    # the long one, and the short one when the old pool is full, get a new pool.
    roomy = make_config(
        ("ml", policy_spec(placement={"targets": ["aws-euc1"]}, limits={"maxPools": 2}))
    )
    for job, pool, into in ((short, old, "old"), (long, old, None), (short, full, None)):
        plan = decide.plan(
            Snapshot(workloads=(job,), onprem=BUSY_V100, pools=(pool,)), CATALOG, roomy, NOW
        )
        assert not [a for a in plan.actions if isinstance(a, ResizePool)]
        (dispatch,) = dispatches(plan).values()
        assert (dispatch.pool == "old") == (into == "old"), dispatch


def test_a_late_run_is_not_refused_unpriced_for_a_budget_a_pool_past_its_lifetime_fits() -> None:
    # One pool allowed, past its lifetime, its nodes reserved at 0.10 USD an hour. The job's
    # deadline is lost whatever runs it, so it is tried late; its team has 0.50 USD of a hard
    # budget left, too little for any new run (the cheapest V100 costs more an hour) but enough
    # for a GPU of the old pool for 2 h: the lowest price a late run could pay is that pool's.
    cfg = make_config(
        ("ml", policy_spec(placement={"targets": ["aws-euc1"]}, limits={"maxPools": 1}))
    )
    old = _pool(
        "old",
        created=NOW - 25 * H,
        free_gpus=(1,),
        busy_until=(NOW + 10 * H,),
        hourly=Money.of("0.10", "USD"),
    )
    lost = workload("lost", deadline=NOW + H)
    budgets = (BudgetView("ml-team", "team", "ml", Money.of("0.50", "USD"), hard=True),)
    snap = Snapshot(workloads=(lost,), onprem=BUSY_V100, pools=(old,), budgets=budgets)
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    assert dispatches(plan)["lost"].pool == "old"


def test_at_the_pool_limit_a_budget_short_of_a_node_refuses_a_run_unpriced() -> None:
    # One pool allowed and it is full: a 1-GPU job for 2 h can only grow it by a node of
    # 4 V100 at 4.00 USD an hour, 8.00 USD at least. Its team's hard budget has 5.00 USD left:
    # enough for a GPU's share of a node, not for a node. It is refused without pricing, saying
    # the least it needs; with 20.00 USD left the pool grows for it.
    cfg = make_config(
        ("ml", policy_spec(placement={"targets": ["aws-euc1"]}, limits={"maxPools": 1}))
    )
    full = _pool("full", free_gpus=(0,), hourly=Money.of("4.00", "USD"))
    job = workload("job", deadline=NOW + 3 * H)

    def planned(left: str) -> Plan:
        budgets = (BudgetView("ml-team", "team", "ml", Money.of(left, "USD"), hard=True),)
        snap = Snapshot(workloads=(job,), onprem=BUSY_V100, pools=(full,), budgets=budgets)
        return decide.plan(snap, CATALOG, cfg, NOW)

    plan = planned("5.00")
    assert not dispatches(plan)
    assert "budget ml-team: 5.00 USD left, needs at least 8.00 USD" in skip_reason(plan, "job")
    assert dispatches(planned("20.00"))["job"].pool == "full"


def test_a_burst_ahead_in_the_queue_lets_the_next_one_stay() -> None:
    # 8 V100 busy for 2 h. `first` (8 GPUs, 3 h) cannot make its 4 h deadline and bursts;
    # `second` (8 GPUs, 3 h, deadline 6 h) then starts at 2 h and finishes at 5 h: on time.
    onprem = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 8, NOW + 2 * H),))
    first = workload(
        "first", gpus_per_pod=8, deadline=NOW + 4 * H, expected_runtime=3 * H, created=NOW - 2 * H
    )
    second = workload("second", gpus_per_pod=8, deadline=NOW + 6 * H, expected_runtime=3 * H)
    plan = decide.plan(
        Snapshot(workloads=(first, second), onprem=onprem), CATALOG, make_config(), NOW
    )
    assert "first" in dispatches(plan)
    assert skip_reason(plan, "second").startswith("deadline met on-prem: est. finish 14:00")


def test_a_refused_burst_stays_and_puts_the_next_at_risk() -> None:
    # As above, but `first` belongs to a team with no budget left: it stays on-prem, so `second`
    # now finishes at 8 h, past its deadline, and bursts in the next round.
    onprem = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 8, NOW + 2 * H),))
    first = workload(
        "first",
        team="broke",
        gpus_per_pod=8,
        deadline=NOW + 4 * H,
        expected_runtime=3 * H,
        created=NOW - 2 * H,
    )
    second = workload("second", gpus_per_pod=8, deadline=NOW + 6 * H, expected_runtime=3 * H)
    budgets = (BudgetView("broke", "team", "broke", Money.of("0", "USD")),)
    plan = decide.plan(
        Snapshot(workloads=(first, second), onprem=onprem, budgets=budgets),
        CATALOG,
        make_config(),
        NOW,
    )
    assert "budget broke: 0.00 USD left" in skip_reason(plan, "first")
    assert "est. on-prem finish 17:00 > 15:00 - 30m margin" in dispatches(plan)["second"].reason


def test_one_no_pool_may_take_stays_from_the_first_round_and_the_next_most_urgent_takes_the_room() -> (
    None
):
    # At the pool limit the only room is a GPU on a spot pool. `first` has no slack for a spot
    # restart: no pool it may use has room, so it stays on-prem, and `second`, behind it, now
    # misses its deadline. `second` is more urgent than `third` and takes the room; were `first`
    # counted as leaving until refused, `second` would not want it yet and `third` would take it.
    spec = policy_spec(
        placement={"targets": ["aws-euc1"], "capacity": "spot-if-slack"},
        limits={"maxPools": 1, "maxNodesPerPool": 1},
    )
    cfg = make_config(("ml", spec))
    spot = _pool(
        "aws-euc1-p3-8xlarge-spot-1",
        offer=OfferKey("aws", "eu-central-1", "p3.8xlarge", "spot", "V100", 4),
        free_gpus=(1,),
    )
    onprem = OnPrem({"V100": 1}, (RunningWorkload("r", "V100", 1, NOW + H),))  # free in 1 h
    queue = tuple(
        workload(name, deadline=NOW + due, expected_runtime=H, created=NOW - i * H)
        for name, due, i in (
            ("first", 2 * H, 3),  # on-prem: 2 h; on spot, 2 x (10 m + 1 h) leaves no slack
            ("second", 3 * H, 2),  # on-prem: 3 h behind `first`, 2 h without it
            ("third", 3 * H + timedelta(minutes=20), 1),  # on-prem: 3 h or later
        )
    )
    snap = Snapshot(workloads=queue, onprem=onprem, pools=(spot,))
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    assert list(dispatches(plan)) == ["second"]
    assert dispatches(plan)["second"].pool == spot.name
    assert skip_reason(plan, "first").endswith("policy ml: max 1 pools reached")
    assert decide.plan(snap, CATALOG, cfg, NOW, skips=False).actions == plan.actions


def test_under_best_effort_a_refused_burst_that_stays_lets_a_small_one_behind_run_past() -> None:
    # 4 A100s, all free. `lost` (1 GPU) is past its deadline: it triggers, no cloud can meet it,
    # so it stays. `wide` (4 GPUs, not burstable) waits behind it, and `small` (1 GPU, 5 min,
    # deadline +35 min) behind both. Planned with `lost` leaving, `wide` took all four GPUs at
    # once and `small` looked due at +10 min, past its margin, so it burst; with `lost` staying,
    # BestEffortFIFO starts `small` now beside it, past the `wide` one that does not fit.
    five = timedelta(minutes=5)
    at = {"created": NOW - H, "accelerator": "A100", "expected_runtime": five}
    lost = workload("lost", deadline=NOW, **at)
    wide = workload("wide", pods=4, burstable=False, **{**at, "created": NOW - H + five})
    small = workload("small", deadline=NOW + 7 * five, **{**at, "created": NOW - H + 2 * five})
    snap = Snapshot(workloads=(lost, wide, small), onprem=OnPrem({"A100": 4}))
    plan = decide.plan(snap, CATALOG, make_config(queueing="BestEffortFIFO"), NOW)
    assert dispatches(plan) == {}
    assert skip_reason(plan, "small").startswith("deadline met on-prem")
    assert "no cloud offer meets the deadline" in skip_reason(plan, "lost")


def test_under_best_effort_the_last_room_given_to_a_burst_that_lost_its_reason_comes_back() -> None:
    # 4 V100s free, one pool with a GPU free and no room for more. `late` (waited 3 h, past the
    # 2-hour trigger) and `small` (deadline +35 min) both want it; `small` is the more urgent and
    # takes it, `late` is refused and stays. Staying, `late` holds `wide` back, and the cluster
    # starts `small` now: its burst has lost its reason, and no plan may send it, with or without
    # reasons (a replay's plan had stopped at "no room left" before looking).
    five = timedelta(minutes=5)
    cfg = _one_pool_and_a_wait_trigger(queueing="BestEffortFIFO")
    at = {"created": NOW - H, "expected_runtime": five}
    late = workload("late", pending_since=NOW - 3 * H, **at)
    wide = workload("wide", pods=4, burstable=False, **{**at, "created": NOW - H + five})
    small = workload(
        "small", deadline=NOW + 7 * five, **{**at, "created": NOW - H + 2 * five}, pending_since=NOW
    )
    snap = Snapshot(
        workloads=(late, wide, small), onprem=OnPrem({"V100": 4}), pools=(_pool(free_gpus=(1,)),)
    )
    for skips in (True, False):
        assert dispatches(decide.plan(snap, CATALOG, cfg, NOW, skips=skips)) == {}


def test_competing_workloads_never_exceed_a_hard_budget() -> None:
    jobs = tuple(
        workload(f"j{i}", deadline=NOW + 3 * H + i * timedelta(minutes=1)) for i in range(10)
    )
    one = decide.plan(Snapshot(workloads=jobs[:1], onprem=BUSY_V100), CATALOG, make_config(), NOW)
    each = dispatches(one)["j0"].estimated_cost
    budget = BudgetView("ml", "team", "ml", Money(each.micros * 3 + 1, "USD"))
    plan = decide.plan(
        Snapshot(workloads=jobs, onprem=BUSY_V100, budgets=(budget,)), CATALOG, make_config(), NOW
    )
    sent = dispatches(plan)
    assert sorted(sent) == ["j0", "j1", "j2"]  # most urgent first
    assert sum(d.estimated_cost.micros for d in sent.values()) <= budget.remaining.micros


def test_plan_without_service_config_is_a_clear_error() -> None:
    with pytest.raises(decide.PlanError, match="needs the ServiceConfig"):
        decide.plan(Snapshot(), CATALOG, Config(), NOW)


def test_missing_exchange_rate_is_a_clear_error() -> None:
    snap = Snapshot(
        workloads=(workload(deadline=NOW + 3 * H),),
        onprem=BUSY_V100,
        budgets=(BudgetView("b", "team", "ml", Money.of("5", "EUR")),),
    )
    with pytest.raises(decide.PlanError, match=r"usdExchangeRates\.EUR"):
        decide.plan(snap, CATALOG, make_config(), NOW)


def _waiting(price: str | None, gpus: int = 1) -> Plan:
    """A job with no deadline behind 3 h of on-prem work, under a price on waiting."""
    trigger = {"deadlineSafetyMargin": "30m"} | ({"waitPrice": price} if price else {})
    cfg = make_config(("ml", policy_spec(trigger=trigger)))
    snap = Snapshot(NOW, (workload(gpus_per_pod=gpus),), BUSY_V100, ())
    return decide.plan(snap, CATALOG, cfg, NOW)


def test_a_price_on_waiting_bursts_a_job_when_the_time_it_saves_pays_for_the_cloud() -> None:
    # Without a deadline or a maximum wait it waits on-prem, however long.
    assert not dispatches(_waiting(None))
    # A single V100 node costs a few USD an hour; the job would finish on a cloud about 2.5 h
    # sooner (3 h on-prem wait, minus the launch).
    cheap, dear = _waiting("0.10"), _waiting("20")
    assert not dispatches(cheap)
    reason = skip_reason(cheap, "w1")
    assert "sooner, worth" in reason and "but the cloud costs" in reason, reason
    (d,) = dispatches(dear).values()
    assert "per GPU-hour" in d.reason, d.reason
    # The hours saved (3 h on-prem wait less the fastest launch) are priced per GPU.
    assert "2h52m sooner, worth 0.29 USD at 0.10 USD per GPU-hour" in reason, reason
    assert "worth 1.15 USD at 0.10 USD" in skip_reason(_waiting("0.10", gpus=4), "w1")


def test_one_refused_at_its_price_bursts_for_its_deadline_once_those_refused_ahead_stay() -> None:
    """One V100, held until +1 h. `ahead` (2 h) and `late` (1 h, deadline +2h30m) each save
    about 50 minutes in a cloud, not worth its cost at 0.10 a GPU-hour: both are refused at
    their price. Had `ahead` left, `late` would run from +1 h to +2 h, in time; but `ahead`
    stays, so `late` would run from +3 h: its deadline sends it, in the same plan."""
    trigger = {"deadlineSafetyMargin": "30m", "waitPrice": "0.10"}
    ahead = workload("ahead", created=NOW - 2 * H, pending_since=NOW - 2 * H)
    late = workload("late", expected_runtime=H, deadline=NOW + 2 * H + timedelta(minutes=30))
    onprem = OnPrem({"V100": 1}, (RunningWorkload("r", "V100", 1, NOW + H),))
    for queueing in ("StrictFIFO", "BestEffortFIFO"):
        cfg = make_config(("ml", policy_spec(trigger=trigger)), queueing=queueing)
        for skips in (True, False):
            snap = Snapshot(NOW, (ahead, late), onprem, ())
            plan = decide.plan(snap, CATALOG, cfg, NOW, skips=skips)
            sent = dispatches(plan)
            assert list(sent) == ["late"], (queueing, skips, plan.skips)
            assert sent["late"].reason.startswith("deadline at risk: est. on-prem finish 13:00")
            if skips:
                assert "but the cloud costs" in skip_reason(plan, "ahead")


def test_a_margin_in_proportion_to_the_runtime_widens_it_for_long_runs() -> None:
    """A run of 2 h estimated to end an hour before its deadline: safe with 30 minutes and a
    quarter of the run (1 h in all), at risk with half of it (1h30m)."""

    def plan(share: float) -> Plan:
        trigger = {"deadlineSafetyMargin": "30m", "deadlineSafetyShare": share}
        cfg = make_config(("ml", policy_spec(trigger=trigger)))
        snap = Snapshot(NOW, (workload(deadline=NOW + 6 * H),), BUSY_V100, ())
        return decide.plan(snap, CATALOG, cfg, NOW)

    met = "deadline met on-prem: est. finish 14:00 <= 15:00 - 1h margin"
    assert skip_reason(plan(0.25), "w1") == met
    (d,) = dispatches(plan(0.5)).values()
    assert "deadline at risk: est. on-prem finish 14:00 > 15:00 - 1h30m margin" in d.reason


def test_a_deadline_counted_on_part_of_the_runtime_bursts_only_when_that_shorter_run_misses() -> (
    None
):
    """A run of 2 h estimated to start at 12:00: at risk for a deadline of 13:30 (30m margin) if
    the whole 2 h is counted; with half of it counted (a run as often half as long as guessed),
    only when 13:00 is past the deadline less the margin."""

    def plan(share: float, deadline: datetime) -> Plan:
        trigger = {"deadlineSafetyMargin": "30m", "deadlineRuntimeShare": share}
        cfg = make_config(("ml", policy_spec(trigger=trigger)))
        snap = Snapshot(NOW, (workload(deadline=deadline),), BUSY_V100, ())
        return decide.plan(snap, CATALOG, cfg, NOW)

    half_past_one = NOW + 4 * H + timedelta(minutes=30)
    (d,) = dispatches(plan(1.0, half_past_one)).values()
    assert "deadline at risk: est. on-prem finish 14:00 > 13:30 - 30m margin" in d.reason
    assert skip_reason(plan(0.5, half_past_one), "w1") == (
        "deadline met on-prem: est. finish of a run 50% as long as expected 13:00 <= 13:30 - "
        "30m margin"
    )
    (d,) = dispatches(plan(0.5, half_past_one - timedelta(minutes=10))).values()
    assert (
        "deadline at risk: est. on-prem finish of a run 50% as long as expected 13:00 > "
        "13:20 - 30m margin"
    ) in d.reason


def test_a_deadline_runtime_share_is_a_share_above_0_and_at_most_1() -> None:
    cfg = make_config(("ml", policy_spec(trigger={"deadlineRuntimeShare": 0.5})))
    assert cfg.policies["ml"].spec.trigger.deadline_runtime_share == 0.5
    for share in (0, 1.5):
        trigger = {"deadlineRuntimeShare": share}
        with pytest.raises(ValueError, match="deadlineRuntimeShare"):
            make_config(("ml", policy_spec(trigger=trigger)))


def test_one_its_wait_sends_is_estimated_as_if_the_others_its_wait_sends_had_left() -> None:
    # 8 V100s, 7 held until +2 h. `wide` (8 GPUs, 1 h, deadline +4 h) and `small` (1 GPU, 5 h)
    # behind it have both waited past the 2-hour trigger: both leave whatever their estimate.
    # Under BestEffortFIFO `small`, had it stayed, would have taken the free GPU now and held
    # `wide` back to +5 h, its deadline at risk; but `small` leaves too, so `wide` would start at
    # +2 h, in time: it is sent for its wait, as under StrictFIFO.
    wide = workload(
        "wide",
        gpus_per_pod=8,
        expected_runtime=H,
        deadline=NOW + 4 * H,
        created=NOW - 3 * H,
        pending_since=NOW - 3 * H,
    )
    small = workload(
        "small",
        expected_runtime=5 * H,
        created=NOW - 150 * timedelta(minutes=1),
        pending_since=NOW - 150 * timedelta(minutes=1),
    )
    onprem = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 7, NOW + 2 * H),))
    for queueing in ("StrictFIFO", "BestEffortFIFO"):
        cfg = _one_pool_and_a_wait_trigger(queueing=queueing)
        for skips in (True, False):
            plan = decide.plan(
                Snapshot(workloads=(wide, small), onprem=onprem), CATALOG, cfg, NOW, skips=skips
            )
            assert dispatches(plan)["wide"].reason.startswith("pending 3h >= max wait 2h"), queueing
    # Were `small` to stay (not burstable), it would hold `wide` back past its deadline.
    held = Snapshot(workloads=(wide, replace(small, burstable=False)), onprem=onprem)
    plan = decide.plan(held, CATALOG, _one_pool_and_a_wait_trigger("BestEffortFIFO"), NOW)
    assert dispatches(plan)["wide"].reason.startswith("deadline at risk: est. on-prem finish 15:00")


@pytest.mark.parametrize(
    ("up", "asked", "start"),
    [
        (1, NOW - timedelta(minutes=2), NOW + timedelta(minutes=8)),  # aws-euc1: 10 m a launch
        (1, NOW - timedelta(minutes=15), NOW + timedelta(minutes=10)),  # late: 10 m from now
        (None, None, NOW),  # up: it starts now
    ],
)
def test_work_on_the_room_a_resize_adds_starts_when_its_node_is_expected_up(
    up: int | None, asked: datetime | None, start: datetime
) -> None:
    # A pool of two 4-V100 nodes being resized: the first up and full until +3 h, the second on
    # its way since `asked`, with one GPU's work planned on it, told as ending in 3 h from now
    # (it starts when the node is up). A 2-hour run on the second node's room, within that work,
    # keeps no node up longer: it reuses the pool, and starts when the node is up. The service
    # shows a resizing pool as ready (it runs its jobs).
    growing = _pool(
        nodes=2,
        free_gpus=(0, 3),
        busy_until=(NOW + 3 * H, NOW + 3 * H),
        nodes_up=up,
        resized_at=asked,
    )
    snap = Snapshot(workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=(growing,))
    placed = dispatches(decide.plan(snap, CATALOG, make_config(), NOW))["w1"]
    assert placed.pool == growing.name, placed
    assert placed.estimated_finish == start + 2 * H


def test_room_left_on_a_node_a_plan_adds_is_dated_from_when_the_node_is_up() -> None:
    # One pool allowed, its one node of 4 V100 full until +3 h. The first job grows it by a node
    # (up in 10 minutes); the second takes a GPU of that node's room: both finish a runtime after
    # the node is up, not the second a runtime from now.
    cfg = make_config(
        ("ml", policy_spec(placement={"targets": ["aws-euc1"]}, limits={"maxPools": 1}))
    )
    full = _pool(free_gpus=(0,), busy_until=(NOW + 3 * H,))
    jobs = (workload("a", deadline=NOW + 4 * H), workload("b", deadline=NOW + 4 * H))
    plan = decide.plan(Snapshot(workloads=jobs, onprem=BUSY_V100, pools=(full,)), CATALOG, cfg, NOW)
    placed = dispatches(plan)
    assert [placed[uid].pool for uid in "ab"] == [full.name] * 2
    assert [placed[uid].estimated_finish for uid in "ab"] == [
        NOW + timedelta(minutes=10) + 2 * H
    ] * 2
    (resize,) = [a for a in plan.actions if isinstance(a, ResizePool)]
    assert resize.nodes == 2


def test_of_two_pools_with_room_at_one_price_the_run_takes_the_one_it_keeps_up_no_longer() -> None:
    # Two pools of the same offer with 3 V100 free: the work on `a` ends in 10 minutes, that on
    # `b` in 3 h. A 2-hour run on `a` would keep its node up 1 h 50 m for itself alone, more than
    # a node of its own costs; on `b` it keeps nothing up longer. The first by name that fits
    # was taken, its node time weighed against a new pool: a new pool, and b's room left idle.
    a = _pool("a", free_gpus=(3,), busy_until=(NOW + timedelta(minutes=10),))
    b = _pool("b", free_gpus=(3,), busy_until=(NOW + 3 * H,))
    snap = Snapshot(workloads=(workload(deadline=NOW + 4 * H),), onprem=BUSY_V100, pools=(a, b))
    plan = decide.plan(snap, CATALOG, make_config(), NOW)
    assert dispatches(plan)["w1"].pool == "b"
    assert not creates(plan)
