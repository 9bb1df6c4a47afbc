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
from kubernetes import client
from sqlalchemy import select

from burst import config
from burst.amounts import Money
from burst.app import reconciler_for
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.demo.scenario import job_manifest
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects
from burst.money import ledger
from burst.sandbox import Sandbox
from burst.store import database
from burst.store.tables import BudgetReservation, LedgerEntry, Pool, Workload
from providers.sim import SimCloud, SimProvider, SimSettings
from tests.conftest import ROOT, wait_for

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
    cluster = Sandbox(clock=clock, tick=0.01).start()
    remote = KubeObjects(client.ApiClient(client.Configuration(host=cluster.url)))
    world = SimCloud(clock, settings=SimSettings())
    provider = SimProvider(
        world,
        target="sim-aws",
        cloud="aws",
        region="eu-central-1",
        offers=lambda: list(SHIPPED),
        kube=remote.api,
    )
    engine = database.make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    database.upgrade(engine)
    sessions = database.sessions(engine)
    local = KubeObjects(kube)
    local.ensure_namespace("cms-ml")
    local.core.create_namespaced_secret(
        "cms-ml", {"metadata": {"name": "wandb-api-key"}, "stringData": {"k": "v"}}
    )
    for name in ("one", "two", "three"):
        job = job_manifest(name, 1, deadline="6h", seconds=1200)
        local.batch.create_namespaced_job("cms-ml", job, _preload_content=False)
    caplog.set_level(logging.INFO, logger="burst")
    observer = Observer(kube, clock).start()
    (limit,) = ledger.budget_limits(cfg)
    try:
        assert observer.wait_synced()
        wait_for(lambda: len(observer.workloads()) == 3)
        loop = reconciler_for(
            cfg,
            SHIPPED,
            clock,
            sessions,
            observer,
            kube,
            {"sim-aws": remote.api},
            {"sim-aws": provider},
        )
        estimates: set[int] = set()
        for _ in range(12 * 60):  # twelve hours, a pass a minute
            loop.run_once()
            with sessions() as s:
                used = ledger.used(s, limit, clock.now(), {})
                assert used <= BUDGET, f"{used} of {BUDGET} after {clock.now()}"
                held = s.scalars(select(BudgetReservation).where(BudgetReservation.state == "held"))
                amounts = [r.amount_micros for r in held]
                assert len(amounts) <= 1, amounts  # any two estimates exceed the budget
                estimates |= set(amounts)
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
