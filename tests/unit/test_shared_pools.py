"""Pools shared across policies (a policy's `placement.sharePools`): a workload takes the free room
of another sharing policy's open pool, never grows or opens one for it, and its policy's limits
count only the pools its own policy holds; an idle shared pool is kept for the work of every
policy sharing it; the replay spends each run from its own policy's budgets."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import Any
from unittest.mock import ANY

from burst import config as configuration
from burst import decide
from burst.amounts import Money
from burst.config import Budget, Config
from burst.model import (
    BudgetView,
    CreatePool,
    DeletePool,
    Dispatch,
    OfferKey,
    Plan,
    PoolView,
    ResizePool,
    Snapshot,
    Workload,
)
from burst.sim import simulate, variants
from burst.sim.trace import SimJob
from tests.builders import NOW, make_config, policy_spec, workload
from tests.conftest import ROOT
from tests.unit.test_decide import BUSY_V100, CATALOG, H
from tests.unit.test_simulate import CFG, OFFERS, STEADY

P3_8X = OfferKey("aws", "eu-central-1", "p3.8xlarge", "on-demand", "V100", 4)


def _config(
    share_ml: bool, share_viz: bool, viz_limits: dict[str, Any] | None = None, **more: Any
) -> Config:
    """Policies `ml` (namespace ml) and `viz` (namespace viz), both on aws-euc1 alone, with
    `more` of the policy spec for both."""

    def spec(namespace: str, share: bool, limits: dict[str, Any]) -> dict[str, Any]:
        return policy_spec(
            selector={"namespaces": [namespace]},
            placement={"targets": ["aws-euc1"], "sharePools": share},
            limits=limits,
            **more,
        )

    return make_config(
        ("ml", spec("ml", share_ml, {"maxPools": 1, "maxNodesPerPool": 4})),
        ("viz", spec("viz", share_viz, viz_limits or {})),
    )


def _pool(name: str, policy: str, free: tuple[int, ...], hourly: str | None = None) -> PoolView:
    return PoolView(
        hourly=None if hourly is None else Money.of(hourly, "USD"),
        name=name,
        target="aws-euc1",
        policy=policy,
        offer=P3_8X,
        nodes=len(free),
        state="ready",
        created=NOW - H,
        free_gpus=free,
    )


def _viz_job(uid: str = "v1") -> Workload:
    return workload(uid, namespace="viz", team="viz", deadline=NOW + 3 * H)


def _plans(snap: Snapshot, cfg: Config) -> Plan:
    """The plan, checked to be the one a plan without reasons (a replay's) makes too."""
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    assert decide.plan(snap, CATALOG, cfg, NOW, skips=False).actions == plan.actions
    return plan


def _dispatch(plan: Plan, uid: str) -> Dispatch | None:
    return next((a for a in plan.actions if isinstance(a, Dispatch) and a.workload == uid), None)


def test_a_workload_takes_the_free_room_of_a_pool_its_policy_shares() -> None:
    snap = Snapshot(
        workloads=(_viz_job(),), onprem=BUSY_V100, pools=(_pool("ml-pool", "ml", (3,)),)
    )
    plan = _plans(snap, _config(share_ml=True, share_viz=True))
    placed = _dispatch(plan, "v1")
    assert placed is not None and placed.pool == "ml-pool", plan
    assert "reuses pool ml-pool with free room (policy ml shares it)" in placed.reason
    assert not [a for a in plan.actions if isinstance(a, CreatePool | ResizePool)]


def test_a_pool_is_shared_only_where_both_policies_share() -> None:
    """Where either policy keeps its pools to itself, the viz job opens a pool of its own."""
    snap = Snapshot(
        workloads=(_viz_job(),), onprem=BUSY_V100, pools=(_pool("ml-pool", "ml", (3,)),)
    )
    for share_ml, share_viz in ((True, False), (False, True), (False, False)):
        plan = _plans(snap, _config(share_ml, share_viz))
        placed = _dispatch(plan, "v1")
        assert placed is not None and placed.pool != "ml-pool", (share_ml, share_viz)
        (created,) = [a for a in plan.actions if isinstance(a, CreatePool)]
        assert created.policy == "viz" and created.pool == placed.pool


def test_at_its_pool_limit_a_workload_takes_the_room_of_a_shared_pool() -> None:
    """viz holds its one pool, full and at its node limit: the room of ml's pool is what is
    left, and it is not refused for viz's pool limit unpriced."""
    full = _pool("viz-pool", "viz", (0,))
    snap = Snapshot(
        workloads=(_viz_job(),),
        onprem=BUSY_V100,
        pools=(full, _pool("ml-pool", "ml", (0, 2))),
    )
    tight = {"maxPools": 1, "maxNodesPerPool": 1}
    shared = _plans(snap, _config(True, True, tight))
    placed = _dispatch(shared, "v1")
    assert placed is not None and placed.pool == "ml-pool", shared
    alone = _plans(snap, _config(True, False, tight))
    assert _dispatch(alone, "v1") is None
    assert [s.reason.rpartition(", but ")[2] for s in alone.skips if s.workload == "v1"] == [
        "policy viz: max 1 pools reached"
    ]


def test_a_shared_pool_grows_for_its_own_policy_alone() -> None:
    """ml's pool of one node is full; viz's of two is full at viz's node limit of two. viz at its
    pool limit may not grow ml's pool, and below the limit opens a pool of its own rather than
    growing ml's."""
    snap = Snapshot(
        workloads=(_viz_job(),),
        onprem=BUSY_V100,
        pools=(_pool("viz-pool", "viz", (0, 0)), _pool("ml-pool", "ml", (0,))),
    )
    at_limit = _plans(snap, _config(True, True, {"maxPools": 1, "maxNodesPerPool": 2}))
    assert _dispatch(at_limit, "v1") is None
    assert not [a for a in at_limit.actions if isinstance(a, ResizePool)]
    below = _plans(snap, _config(True, True, {"maxPools": 2, "maxNodesPerPool": 2}))
    placed = _dispatch(below, "v1")
    assert placed is not None and placed.pool not in ("viz-pool", "ml-pool"), below
    (created,) = [a for a in below.actions if isinstance(a, CreatePool)]
    assert created.policy == "viz"


def test_a_hard_budget_too_small_for_its_own_pools_still_affords_a_shared_pools_room() -> None:
    """viz's team has 5 USD left under a hard budget. Growing viz's own pool (a node at 40 USD an
    hour) costs far more; the room on ml's pool (1 USD a node-hour) costs cents. The least a run
    of it may cost counts the shared room: it is not refused for the budget unpriced."""
    snap = Snapshot(
        workloads=(_viz_job(),),
        onprem=BUSY_V100,
        pools=(_pool("viz-pool", "viz", (0,), "40"), _pool("ml-pool", "ml", (0, 1), "1")),
        budgets=(BudgetView("b-viz", "team", "viz", Money.of("5", "USD")),),
    )
    plan = _plans(snap, _config(True, True, {"maxPools": 1, "maxNodesPerPool": 2}))
    placed = _dispatch(plan, "v1")
    assert placed is not None and placed.pool == "ml-pool", plan


def test_an_idle_pool_is_kept_for_the_work_a_policy_sharing_it_expects() -> None:
    """ml's pool is idle and chooses its TTL against the next arrival (a launch takes 10
    minutes). A viz workload's 2-hour wait ends in 5 minutes, and viz's sends come every 6: where
    both policies share their pools, that is this pool's work too, and the pool is kept; where
    they do not, it goes."""
    idle = replace(_pool("ml-pool", "ml", (4,)), idle_since=NOW - timedelta(minutes=2))
    waits = workload(
        "v1",
        namespace="viz",
        team="viz",
        pending_since=NOW - 2 * H + timedelta(minutes=5),
        deadline=NOW + 30 * H,
    )

    def config(share: bool) -> Config:
        return _config(
            share,
            share,
            trigger={"deadlineSafetyMargin": "30m", "maxPendingWait": "2h"},
            teardown={"idleTtl": "30m", "idleTtlChoice": "next-arrival"},
        )

    for snap in (
        Snapshot(workloads=(waits,), onprem=BUSY_V100, pools=(idle,)),
        Snapshot(onprem=BUSY_V100, pools=(idle,), sent_last_hour={"viz": 10}),
    ):
        assert not _deleted(snap, config(True)), snap
        assert list(_deleted(snap, config(False))) == ["ml-pool"], snap


def _deleted(snap: Snapshot, cfg: Config) -> dict[str, str]:
    plan = decide.plan(snap, CATALOG, cfg, NOW)
    return {a.pool: a.reason for a in plan.actions if isinstance(a, DeletePool)}


def test_a_shared_pool_dearer_than_a_policys_price_cap_takes_none_of_its_work() -> None:
    """ml's pool has room at 40 USD a node-hour; viz allows at most 20: its job opens a pool of
    its own, as it would be refused a new pool at that price."""
    snap = Snapshot(
        workloads=(_viz_job(),),
        onprem=BUSY_V100,
        pools=(_pool("ml-pool", "ml", (3,), "40"),),
    )
    cheap = _plans(snap, _config(True, True, {"maxHourlyPrice": "20"}))
    placed = _dispatch(cheap, "v1")
    assert placed is not None and placed.pool != "ml-pool", cheap
    dear = _plans(snap, _config(True, True, {"maxHourlyPrice": "45"}))
    assert _dispatch(dear, "v1") == replace(
        placed, pool="ml-pool", reason=ANY, estimated_cost=ANY, estimated_finish=ANY
    )


def test_a_replayed_job_on_another_policys_pool_is_spent_from_its_own_policys_budget() -> None:
    """The replay's budgets keep to the ledger's rule: an atlas-ml job (policy atlas-ml) that runs
    in the room of a cms-ml job's pool (policy cms-ml) is spent from atlas-ml's budget, not
    cms-ml's (variants.per_namespace makes a policy of each namespace)."""
    example = configuration.load(
        [ROOT / "docs" / "examples" / "simulate"],
        configuration.Vocabulary(CATALOG.regions(), CATALOG.accelerators()),
    )
    cfg = variants.per_namespace(example, "ml-training", share=True)
    for name in cfg.policies:
        cfg = variants.with_placement(cfg, name, capacity="on-demand")
    budgets = {
        name: Budget.model_validate(
            {
                "apiVersion": "burst.dev/v1",
                "kind": "Budget",
                "metadata": {"name": name},
                "spec": {
                    "scope": {"policy": name},
                    "period": "month",
                    "amount": "100000",
                    "currency": "USD",
                    "enforcement": "soft",
                },
            }
        )
        for name in ("cms-ml", "atlas-ml")
    }
    cfg = replace(cfg, budgets=budgets)
    jobs = [  # on-prem held for a day; then three GPUs of cms-ml's, one of atlas-ml's
        SimJob("hold", 0, 86_400, 8, 1, 8, 200_000, "cms-ml"),
        SimJob("cms", 10, 7_200, 3, 1, 3, 10_000, "cms-ml"),
        SimJob("atlas", 1_000, 3_600, 1, 1, 1, 10_000, "atlas-ml"),
    ]
    world = simulate.World(jobs, {"V100": 8}, cfg, CATALOG, seed=1, clouds=STEADY)
    world.run(simulate.Burst(cfg))
    ran = {j.spec.job_id: j for j in world.jobs}
    assert ran["atlas"].ran_in_cloud and ran["cms"].ran_in_cloud
    assert [p.policy for p in world.pool_list] == ["cms-ml"]  # one pool: both ran there
    spent = {
        name: sum(v for (b, _), v in world.budget_used.items() if b == name) for name in budgets
    }
    assert spent == {"cms-ml": world.job_usage["cms"], "atlas-ml": world.job_usage["atlas"]}


def test_a_replayed_idle_shared_pool_goes_when_the_sharing_policies_sends_fall_below_its_keep() -> (
    None
):
    """As the replay's own next-arrival test (test_simulate.py), with the tight jobs' sends
    alternating between two policies that share their pools: an idle pool is kept by the sends of
    both, and is asked about again, and goes, when the second send is an hour old, not at its
    2-hour TTL (the sends of its own policy alone never kept it)."""
    assert CFG.service is not None
    launch = next(t.provisioning for t in CFG.service.spec.targets if t.cloud == "gcp")
    needed = math.ceil(H / launch)
    hog = SimJob("hog", 0, 4 * 3600, 8, 1, 8, 10**6, "cms-ml")
    tight = [
        SimJob(
            f"t{i}", 10 + 60 * i, 600, 1, 1, 1, 10 + 60 * i + 3600, ("cms-ml", "atlas-ml")[i % 2]
        )
        for i in range(needed + 1)
    ]
    cfg = variants.per_namespace(CFG, "ml-training", share=True)
    for name in ("cms-ml", "atlas-ml", "ml-research"):
        cfg = variants.with_teardown(
            cfg, name, idle_ttl=timedelta(hours=2), idle_ttl_choice="next-arrival"
        )
    world = simulate.World([hog, *tight], {"V100": 8}, cfg, OFFERS, seed=1, clouds=STEADY)
    world.run(simulate.Burst(cfg))
    assert all(j.ran_in_cloud for j in world.jobs[1:])
    sent = [math.ceil(j.spec.submit / world.tick) * world.tick for j in world.jobs[1:]]
    falls = sent[1] + 3600
    assert {p.policy for p in world.pool_list} == {"cms-ml", "atlas-ml"}
    for pool in world.pool_list:
        assert pool.idle_since is not None
        assert pool.idle_since + 600 < falls <= (pool.closed or 0) < falls + world.tick
