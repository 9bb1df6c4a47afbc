"""Pools shared across policies in the running reconcile loop: a job of one policy runs in the
room of another policy's pool, and the ledger spends its run from its own policy and the pool's
idle and overhead from the pool's."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from burst import config
from burst.clock import FakeClock
from burst.demo.scenario import job_manifest
from burst.kube.observe import Observer
from burst.store.tables import Dispatch as DispatchRow
from burst.store.tables import LedgerEntry, Pool, Workload
from tests.conftest import ROOT, wait_for
from tests.integration.test_pool_lifecycle import (
    SHIPPED,
    cloud,
    cms_ml,
    passes_until,
    reconciler,
    sessions_in,
    states,
)


def two_sharing_policies(tmp_path: Path) -> config.Config:
    """The demo's policy for cms-ml and theory, and a copy of it for atlas-ml, each with room
    for one pool on one simulated AWS target, both sharing their pools."""
    text = (ROOT / "burst" / "data" / "demo" / "config.yaml").read_text()
    text = text.replace("targets: [sim-aws, sim-gcp, sim-azure]", "targets: [sim-aws]")
    text = text.replace("maxPools: 4", "maxPools: 1").replace("maxLifetime: 10m", "maxLifetime: 8h")
    text = text.replace("provisioningEstimate: 8s", "provisioningEstimate: 10m", 1)
    text = text.replace("capacity: on-demand", "capacity: on-demand\n    sharePools: true")
    service, policy, rest = text.split("\n---\n", 2)
    atlas = policy.replace("name: demo-training", "name: demo-atlas")
    atlas = atlas.replace("[cms-ml, atlas-ml, theory]", "[atlas-ml]")
    policy = policy.replace("[cms-ml, atlas-ml, theory]", "[cms-ml, theory]")
    (tmp_path / "config.yaml").write_text("\n---\n".join([service, policy, atlas, rest]))
    return config.load([tmp_path], config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()))


def test_a_job_runs_in_another_policys_pool_and_is_spent_from_its_own(
    kube: Any, tmp_path: Path
) -> None:
    cfg = two_sharing_policies(tmp_path)
    assert cfg.policies["demo-atlas"].spec.placement.share_pools
    clock = FakeClock()
    cluster, remote, provider = cloud(clock)
    engine, sessions = sessions_in(tmp_path)
    # No GPUs on-prem: every job goes to the cloud. Three GPUs take a node of four.
    local = cms_ml(kube, job_manifest("big", 3, deadline="4h", seconds=3600))
    local.ensure_namespace("atlas-ml")
    local.core.create_namespaced_secret(
        "atlas-ml", {"metadata": {"name": "wandb-api-key"}, "stringData": {"k": "v"}}
    )
    observer = Observer(kube, clock).start()
    try:
        assert observer.wait_synced()
        wait_for(lambda: observer.workloads())
        loop = reconciler(cfg, clock, sessions, observer, kube, remote.api, provider)
        passes_until(loop, clock, lambda: states(sessions).get("big") == "dispatched")
        small = job_manifest("small", 1, deadline="4h", seconds=600)
        local.batch.create_namespaced_job("atlas-ml", small, _preload_content=False)
        wait_for(lambda: len(observer.workloads()) == 2)
        passes_until(loop, clock, lambda: states(sessions).get("small") == "dispatched")
        with sessions() as s:
            (pool,) = s.scalars(select(Pool)).all()
            assert pool.policy == "demo-training" and pool.gpus_per_node == 4
            on = {
                w.name: (w.policy, d.pool_id)
                for d, w in s.execute(
                    select(DispatchRow, Workload).join(
                        Workload, Workload.id == DispatchRow.workload_id
                    )
                )
            }
            assert on == {"big": ("demo-training", pool.id), "small": ("demo-atlas", pool.id)}
        passes_until(
            loop,
            clock,
            lambda: states(sessions) == {"big": "succeeded", "small": "succeeded"},
            timedelta(minutes=1),
        )

        def deleted() -> bool:
            with sessions() as s:
                return s.scalars(select(Pool.state)).all() == ["deleted"]

        passes_until(loop, clock, deleted)
        clock.advance(timedelta(hours=3))  # the pool's last hours close
        loop.run_once()
        with sessions() as s:
            rows = list(s.scalars(select(LedgerEntry)))
            by = {(r.kind, r.workload_name, r.policy) for r in rows if r.amount_micros}
            assert ("usage", "atlas-ml/small", "demo-atlas") in by, by
            assert ("usage", "cms-ml/big", "demo-training") in by, by
            assert {p for kind, _, p in by if kind != "usage"} == {"demo-training"}, by
        assert provider.world.pools_created() == 1
    finally:
        observer.stop()
        cluster.stop()
        engine.dispose()
