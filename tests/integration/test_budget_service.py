"""Hard budgets in the running reconcile loop, over many passes: a dispatch's estimate is reserved
with the dispatch, closed hours are charged while pools run, and what a budget has used (posted
spend plus what reservations still hold) never passes its amount."""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from burst import config
from burst.amounts import Money
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.demo.scenario import job_manifest
from burst.kube.observe import Observer
from burst.money import ledger
from burst.store.tables import BudgetReservation, LedgerEntry, Pool, Workload
from tests.conftest import ROOT, wait_for
from tests.integration.test_pool_lifecycle import cloud, cms_ml, reconciler, sessions_in

SHIPPED = catalog.shipped()
BUDGET = Money.of("0.60", "USD")


def budget_config(tmp_path: Path) -> config.Config:
    """The demo's configuration with one simulated AWS target and a hard 1 USD daily budget on
    the cms-ml namespace, which any two of the jobs' estimates exceed."""
    text = (ROOT / "burst" / "data" / "demo" / "config.yaml").read_text()
    text = text.replace("targets: [sim-aws, sim-gcp, sim-azure]", "targets: [sim-aws]")
    text = text.replace("maxLifetime: 10m", "maxLifetime: 8h")
    text = text.replace("provisioningEstimate: 8s", "provisioningEstimate: 10m", 1)
    text = text.replace("scope: {team: theory}", "scope: {namespace: cms-ml}")
    text = text.replace('amount: "0.001"', 'amount: "0.60"').replace("period: month", "period: day")
    (tmp_path / "config.yaml").write_text(text)
    return config.load([tmp_path], config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()))


def test_a_hard_budget_holds_over_many_passes(
    kube: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three jobs whose estimates each fit the budget, no two together: the second pass saw
    the whole budget again (reservations were made only in tests, pools metered only when
    deleted) and dispatched all three."""
    cfg = budget_config(tmp_path)
    clock = FakeClock()
    cluster, remote, provider = cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    local = cms_ml(
        kube, *(job_manifest(n, 1, deadline="6h", seconds=1200) for n in ("one", "two", "three"))
    )
    caplog.set_level(logging.INFO, logger="burst")
    observer = Observer(kube, clock).start()
    (limit,) = ledger.budget_limits(cfg)
    try:
        assert observer.wait_synced()
        wait_for(lambda: len(observer.workloads()) == 3)
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)
        estimates: set[int] = set()
        for _ in range(12 * 60):  # twelve hours, a pass a minute
            loop.run_once()
            with sessions() as s:
                used = ledger.used(s, limit, clock.now(), {})
                assert used <= BUDGET, f"{used} of {BUDGET} after {clock.now()}"
                held = list(
                    s.scalars(
                        select(BudgetReservation)
                        .where(BudgetReservation.state == "held")
                        .order_by(BudgetReservation.id)
                    )
                )
                # Any two estimates exceed the budget: one job at a time holds reservations
                # (its estimate first, then what its run needs beyond it).
                assert len({r.workload_id for r in held}) <= 1, held
                estimates |= {r.amount_micros for r in held[:1]}
            clock.advance(timedelta(minutes=1))
        assert estimates and BUDGET.micros < 2 * min(estimates), estimates
        # Each budget stop is logged with its reason when it starts, not on every pass.
        stops = [
            r
            for r in caplog.records
            if getattr(r, "workload", "").startswith("cms-ml/")
            and "budget" in getattr(r, "reason", "")
        ]
        assert stops and len(stops) < 20, [r.getMessage() for r in stops]
        # ... and shown on the job itself, where its owner looks (kubectl describe).
        told = [
            e
            for e in local.core.list_namespaced_event("cms-ml").items
            if e.reason == "NotBursting" and "budget" in e.message
        ]
        assert told and len(told) < 20, [e.message for e in told]
        # Its thresholds crossed are told on its bursting jobs, once each.
        thresholds = [
            e.message
            for e in local.core.list_namespaced_event("cms-ml").items
            if e.reason == "BudgetThreshold"
        ]
        assert any("80% reached" in m for m in thresholds), thresholds
        with sessions() as s:
            states = sorted(w.state for w in s.scalars(select(Workload)))
            entries = list(s.scalars(select(LedgerEntry)))
            spent = sum(e.amount_micros for e in entries)
            (pool,) = s.scalars(select(Pool))
        # Each row says what ran where, as the bill it will be matched with does.
        jobs = [e for e in entries if e.workload_uid]
        assert jobs and {e.workload_name for e in jobs} <= {
            "cms-ml/one",
            "cms-ml/two",
            "cms-ml/three",
        }
        assert {(e.instance_type, e.capacity, e.zone) for e in entries} == {
            (pool.instance_type, pool.capacity, pool.zone)
        }
        assert "succeeded" in states, states
        assert Decimal(spent) / 1_000_000 <= Decimal("0.60")
    finally:
        observer.stop()
        cluster.stop()
        engine.dispose()


def test_a_run_longer_than_its_estimate_is_stopped_before_its_hard_budget_is_passed(
    kube: Any, tmp_path: Path
) -> None:
    """A job that declared 20 minutes and runs for eight hours: its reservation covers the 20
    minutes, and the meter charged it on for hours, past the hard budget (the soak's budget
    ended 0.9 % over the same way, with runs restarted after reclaims). Each pass reserves what
    the run will cost until burst can act again; when the budget refuses, the copy is stopped
    and the job requeued on-prem, saying why, and what the budget has posted stays within it."""
    cfg = budget_config(tmp_path)
    clock = FakeClock()
    cluster, remote, provider = cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    job = job_manifest("long", 1, deadline="12h", seconds=1200)
    job["spec"]["template"]["metadata"]["annotations"]["sandbox.burst.dev/duration"] = "8h"
    local = cms_ml(kube, job)
    observer = Observer(kube, clock).start()
    (limit,) = ledger.budget_limits(cfg)
    try:
        assert observer.wait_synced()
        wait_for(lambda: len(observer.workloads()) == 1)
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)
        copies = 0
        for _ in range(10 * 60):  # ten hours, a pass a minute
            loop.run_once()
            with sessions() as s:
                posted = s.scalar(
                    select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0)).where(
                        LedgerEntry.namespace == "cms-ml"
                    )
                )
                assert posted <= BUDGET.micros, f"{posted} posted after {clock.now()}"
                assert ledger.used(s, limit, clock.now(), {}) <= BUDGET
            copies = max(copies, len(remote.batch.list_job_for_all_namespaces().items))
            clock.advance(timedelta(minutes=1))
        assert copies == 1  # it ran on the cloud, then ...
        with sessions() as s:
            (w,) = s.scalars(select(Workload))
            charged = ledger.workload_cost(s, w.uid)["USD"]
            (pool,) = s.scalars(select(Pool))
        assert w.state in ("requeued", "pending"), w.state
        assert remote.batch.list_job_for_all_namespaces().items == []  # ... its copy went
        # It ran well past its 20 minutes (its node to itself) before the budget stopped it.
        assert pool.gpus_per_node == 1 and charged > pool.unit_price_micros // 3, charged
        told = [
            e.message
            for e in local.core.list_namespaced_event("cms-ml").items
            if e.reason == "BurstRequeued"
        ]
        assert any("hard budget" in m for m in told), told
        spec = local.batch.read_namespaced_job("long", "cms-ml").spec
        assert spec.suspend is False  # back in the on-prem queue
    finally:
        observer.stop()
        cluster.stop()
        engine.dispose()
