"""The open-pool index of decide (burst/decide/reuse.py) chooses what a scan of every pool chose.

Before the index, a workload looked at every open pool its policy, GPU request and capacity type
allowed, and priced each share in Decimal. That scan is kept here as the reference: on seeded
random snapshots (many pools of a few offers, shared prices, launching pools late for tight
deadlines, 12-GPU nodes whose shares do not terminate in decimal, spot interruption rates,
backed-off offers, policies at and below their pool limit, budgets) a plan made with the index
must equal, action for action and reason for reason, the plan made with the reference scan.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from burst import decide
from burst.amounts import Money
from burst.cloud import catalog
from burst.config import Config
from burst.decide import placement, reuse
from burst.decide.candidates import expected_run
from burst.decide.caps import node_cost
from burst.decide.pools import EligiblePools
from burst.decide.reuse import Choice, share_cost
from burst.model import (
    BudgetView,
    Cloud,
    Dispatch,
    OfferKey,
    OnPrem,
    Plan,
    PoolView,
    RunningWorkload,
    Snapshot,
    Workload,
)
from tests.builders import NOW, TARGETS, make_config, policy_spec

CATALOG = catalog.shipped()
REGIONS: dict[str, tuple[Cloud, str]] = {
    "aws-euc1": ("aws", "eu-central-1"),
    "gcp-euw4": ("gcp", "europe-west4"),
    "azure-eastus": ("azure", "eastus"),
}
GPUS = ["V100", "T4", "A100", "H100", "L4", "A10G"]


def scan_reuse(
    eligible: EligiblePools,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    now: datetime,
    per_second: int = 0,
) -> Choice | None:
    """The reuse step as it was: every eligible pool, in the order opened, shares in Decimal;
    each weighed by its cost plus what the wait to its finish is worth at `per_second`, then by
    the node time it keeps up past the work known there."""
    best: tuple[int, datetime, str, Choice] | None = None
    for pool in eligible.pools:
        if not pool.fits(w):
            continue
        nodes = -(-w.pods // (pool.offer.gpus // w.gpus_per_pod))
        run, _ = expected_run(pool.target, pool.offer.capacity, nodes, runtime)
        finish, kept = pool.timed(w, now, run)  # nodes on their way: when those it takes are up
        if finish_by is not None and finish > finish_by:
            continue
        share = Decimal(w.gpus) / pool.offer.gpus
        cost = math.ceil(share * node_cost(pool.hourly_micros, 1, run))
        waiting = per_second * int((finish - now).total_seconds())
        choice = Choice(cost, finish, pool, waiting=waiting, kept=kept)
        reuse = (cost + waiting, kept, finish, pool.name, choice)
        if best is None or reuse[:4] < best[:4]:
            best = reuse
    return None if best is None else best[4]


def scan_growth(
    eligible: EligiblePools,
    w: Workload,
    runtime: timedelta,
    finish_by: datetime | None,
    tail: timedelta,
    max_nodes: int,
    now: datetime,
    per_second: int = 0,
) -> Choice | None:
    """Growing at the pool limit as it was: every eligible pool, in the order opened; each
    weighed by its cost plus what the wait to its finish is worth at `per_second`."""
    best: tuple[int, datetime, str, Choice] | None = None
    for pool in eligible.pools:
        if pool.unavailable or pool.nodes >= max_nodes:
            continue
        extra = pool.extra_nodes_for(w)
        if not extra or extra > max_nodes - pool.nodes:
            continue
        run, restarts = expected_run(pool.target, pool.offer.capacity, extra, runtime)
        launches = (1 + restarts) * pool.target.provisioning
        finish = now + launches + run
        if finish_by is not None and finish > finish_by:
            continue
        total = node_cost(pool.hourly_micros, extra, launches + run + tail)
        waiting = per_second * int((finish - now).total_seconds())
        if best is None or (total + waiting, finish, pool.name) < best[:3]:
            choice = Choice(total, finish, pool, extra, waiting)
            best = (total + waiting, finish, pool.name, choice)
    return None if best is None else best[3]


def random_config(rng: random.Random) -> Config:
    limits: dict[str, Any] = {
        "currency": "USD",
        "maxPools": rng.choice([1, 2, 3, 50]),
        "maxNodesPerPool": rng.choice([2, 4, 8]),
    }
    if rng.random() < 0.3:
        limits["maxCostPerJob"] = str(rng.choice([20, 80, 300]))
    targets = [
        {**t, "spotInterruptionsPerHour": rng.choice([0.02, 0.3])} if rng.random() < 0.3 else t
        for t in TARGETS
    ]
    return make_config(
        (
            "ml",
            policy_spec(
                trigger={
                    "deadlineSafetyMargin": "30m",
                    "maxPendingWait": "1h",
                    **(
                        {"waitPrice": rng.choice(["0.5", "20", "400"])}
                        if rng.random() < 0.4
                        else {}
                    ),
                },
                placement={
                    "targets": [t["name"] for t in TARGETS],
                    "capacity": rng.choice(["on-demand", "spot", "spot-if-slack"]),
                    "accelerators": {
                        "V100": ["V100", "A10G", "L4", "A100"],
                        "T4": ["T4", "L4"],
                        "A100": ["A100", "H100"],
                        "H100": ["H100"],
                    },
                },
                limits=limits,
                teardown={"idleTtl": rng.choice(["0s", "10m"]), "maxLifetime": "48h"},
            ),
        ),
        ("other", policy_spec(selector={"namespaces": ["other"]})),
        targets=targets,
    )


def random_pool(rng: random.Random, i: int, offers: list[tuple[str, OfferKey]]) -> PoolView:
    target, offer = rng.choice(offers)
    nodes = rng.randint(1, 5)
    # Pools of one offer often share a price; some carry the price they were created at.
    hourly = (
        Money(rng.choice([900_000, 2_500_000, 4_000_000]), "USD") if rng.random() < 0.2 else None
    )
    state = rng.choice(["ready", "ready", "creating", "requested"])
    # Some being resized, the nodes added on their way for up to a launch and more.
    resized = state == "ready" and nodes > 1 and rng.random() < 0.3
    return PoolView(
        name=f"pool-{rng.randint(0, 9)}{i:03d}",
        target=target,
        policy=rng.choice(["ml", "ml", "ml", "other", "gone"]),
        offer=offer,
        nodes=nodes,
        state=state,
        # Mostly with when each node's known work ends: a reuse keeps some up past it.
        busy_until=tuple(
            NOW + timedelta(minutes=rng.randint(1, 600)) if rng.random() < 0.8 else None
            for _ in range(nodes)
        )
        if rng.random() < 0.7
        else (),
        nodes_up=rng.randint(1, nodes - 1) if resized else None,
        resized_at=NOW - timedelta(minutes=rng.randint(0, 15)) if resized else None,
        # Some still launching, each ready at its own time; most long since created.
        created=NOW - timedelta(minutes=rng.choice([rng.randint(0, 12), rng.randint(0, 600)])),
        free_gpus=tuple(rng.randint(0, offer.gpus) for _ in range(nodes)),
        idle_since=NOW - timedelta(minutes=rng.randint(0, 30)) if rng.random() < 0.1 else None,
        hourly=hourly,
    )


def random_snapshot(rng: random.Random) -> Snapshot:
    offers = [
        (target, o.key)
        for target, region in REGIONS.items()
        for o in CATALOG.query(GPUS, regions={region})
        if o.gpus <= 16
    ]
    offers = rng.sample(offers, 12)  # few offers: many pools share one
    workloads = []
    for i in range(rng.randint(20, 160)):
        created = NOW - timedelta(minutes=rng.randint(0, 300))
        workloads.append(
            Workload(
                uid=f"w{i:03d}",
                kind="Job",
                namespace=rng.choice(["ml", "ml", "ml", "other"]),
                name=f"job-{i}",
                team=rng.choice(["cms", "atlas"]),
                gpus_per_pod=rng.choice([1, 1, 2, 3, 4, 8]),
                pods=rng.choice([1, 1, 2, 3, 5]),
                created=created,
                pending_since=created,
                accelerator=rng.choice(["V100", "T4", "A100", "H100", None]),
                burstable=rng.random() < 0.9,
                deadline=NOW + timedelta(minutes=rng.randint(20, 30 * 60))
                if rng.random() < 0.7
                else None,
                expected_runtime=timedelta(minutes=rng.randint(5, 8 * 60)),
                priority=rng.choice([0, 1]),
                quota_blocked=rng.random() < 0.2,
            )
        )
    pools = tuple(random_pool(rng, i, offers) for i in range(rng.randint(0, 120)))
    backed_off = tuple(o for _, o in rng.sample(offers, 2)) if rng.random() < 0.5 else ()
    budgets = (
        BudgetView("cms", "team", "cms", Money.of(rng.choice([5, 50, 5000]), "USD")),
        BudgetView("ml", "policy", "ml", Money.of(rng.choice([30, 3000]), "USD"), hard=False),
    )
    onprem = OnPrem(
        {"V100": 8, "T4": 4},
        (RunningWorkload("r", "V100", 8, NOW + timedelta(hours=rng.randint(1, 12))),),
    )
    return Snapshot(
        workloads=tuple(workloads),
        onprem=onprem,
        pools=pools,
        budgets=budgets,
        unavailable=backed_off,
    )


def scanned_plan(snap: Snapshot, cfg: Config, monkeypatch: pytest.MonkeyPatch) -> Plan:
    with monkeypatch.context() as patch:
        patch.setattr(placement, "best_reuse", scan_reuse)
        patch.setattr(reuse, "best_growth", scan_growth)
        return decide.plan(snap, CATALOG, cfg, NOW)


@pytest.mark.parametrize("seed", range(40))
def test_the_index_plans_what_the_scan_of_every_pool_planned(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    cfg, snap = random_config(rng), random_snapshot(rng)
    indexed = decide.plan(snap, CATALOG, cfg, NOW)
    assert indexed == scanned_plan(snap, cfg, monkeypatch)


def test_the_random_snapshots_reach_every_way_into_an_open_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The comparison above means something: its plans reuse pools, grow them at the pool limit,
    and refuse workloads for budgets and deadlines."""
    reasons, onto = [], 0
    for seed in range(40):
        rng = random.Random(seed)
        cfg, snap = random_config(rng), random_snapshot(rng)
        plan = decide.plan(snap, CATALOG, cfg, NOW)
        reasons += [a.reason for a in plan.actions if isinstance(a, Dispatch)]
        reasons += [s.reason for s in plan.skips]
        resizing = {p.name for p in snap.pools if p.nodes_up is not None}
        onto += sum(isinstance(a, Dispatch) and a.pool in resizing for a in plan.actions)
    for found in ("reuses pool", "grows pool", "max", "budget cms", "deadline"):
        assert sum(found in r for r in reasons) >= 5, found
    assert onto >= 5  # onto pools with nodes on their way


@pytest.mark.parametrize("offer_gpus", [1, 2, 3, 4, 6, 7, 8, 12, 16])
def test_a_share_costs_what_the_decimal_share_cost(offer_gpus: int) -> None:
    """Integer shares where the Decimal quotient terminates, the Decimal rounding where it does
    not (5 of 12 GPUs of a 156 micro-unit node: Decimal says 66, exact arithmetic 65)."""
    rng = random.Random(offer_gpus)
    costs = [0, 1, 3, 156, 3600, 10**6, 10**12, 10**24, 10**30]
    costs += [rng.randint(0, 10 ** rng.randint(1, 14)) for _ in range(3000)]
    for gpus in range(1, 2 * offer_gpus + 1):
        for node_micros in costs:
            expected = math.ceil(Decimal(gpus) / offer_gpus * node_micros)
            assert share_cost(gpus, offer_gpus, node_micros) == expected, (gpus, node_micros)
    if offer_gpus == 12:
        assert share_cost(5, 12, 156) == 66
