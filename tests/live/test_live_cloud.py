"""Against a real cloud, opt-in: never in CI. An admin sets BURST_LIVE_CONFIG (a configuration
with the target's ServiceConfig) and BURST_LIVE_TARGET (its name); the credentials come from the
SDK's standard chain, as in production. The test creates a one-node pool of the target's cheapest
shape with burst's tags, resizes it, lists it by owner, deletes it and checks nothing is left.
It costs a few minutes of one GPU node.

    BURST_LIVE_CONFIG=config/ BURST_LIVE_TARGET=aws-eu-central-1 pytest tests/live -s
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import providers
from burst import config
from burst.clock import SystemClock
from burst.cloud import catalog
from burst.cloud.check import check_target
from burst.cloud.provider import Pool, PoolNotFound, PoolSpec, Provider

CONFIG, TARGET = os.environ.get("BURST_LIVE_CONFIG"), os.environ.get("BURST_LIVE_TARGET")
pytestmark = pytest.mark.skipif(
    not (CONFIG and TARGET), reason="set BURST_LIVE_CONFIG and BURST_LIVE_TARGET to run"
)


def _until(what: str, read: Callable[[], bool], minutes: float = 30) -> None:
    deadline = time.monotonic() + minutes * 60
    while not read():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {minutes} minutes")
        time.sleep(30)


def test_a_pool_lives_and_leaves_nothing_behind() -> None:
    assert CONFIG and TARGET
    shipped = catalog.shipped()
    cfg = config.load([Path(CONFIG)], config.Vocabulary(shipped.regions(), shipped.accelerators()))
    assert cfg.service is not None
    target = next(t for t in cfg.service.spec.targets if t.name == TARGET)
    provider: Provider = providers.build(cfg.service, shipped, SystemClock())[TARGET]
    owner = f"{cfg.service.spec.installation_id}-live"
    checks = check_target(TARGET, provider, owner, [])
    assert all(f.ok is not False for f in checks), checks
    offer = min(
        (o for o in provider.offers() if o.region == target.region and o.capacity == "on-demand"),
        key=lambda o: o.hourly.micros,
    )
    spec = PoolSpec(
        name=f"live-{uuid.uuid4().hex[:8]}",
        offer=offer.key,
        nodes=1,
        owner=owner,
        policy="live",
        epoch=1,
        zones=offer.zones[:1],
    )
    seen: list[Pool] = []

    def phase_is(*phases: str) -> Callable[[], bool]:
        def read() -> bool:
            seen.append(provider.get_pool(spec.name))
            return seen[-1].phase in phases

        return read

    try:
        provider.create_pool(spec, uuid.uuid4().hex)
        _until("ready", phase_is("ready", "failed"))
        assert seen[-1].phase == "ready", seen[-1].message
        provider.resize_pool(spec.name, 0)
        _until("resized", phase_is("ready"))
        assert provider.get_pool(spec.name).nodes == 0
        assert [p.name for p in provider.list_pools(owner)] == [spec.name]
    finally:
        provider.delete_pool(spec.name)

        def gone() -> bool:
            try:
                provider.get_pool(spec.name)
            except PoolNotFound:
                return True
            return False

        _until("deleted", gone)
    assert provider.list_pools(owner) == []
