"""The soak's faults: each kind started (and, for those that last, its end scheduled) on the
world of a running Soak, from the harness's seeded schedule (see docs/reliability.md)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from burst.cloud.provider import PoolNotFound, PoolSpec
from burst.model import TAG_OWNER, OfferKey
from providers.sim import SimProvider
from tests.soak import world
from tests.soak.world import INSTALLATION, LEASE_S, REMOTE_GRACE

if TYPE_CHECKING:
    from tests.soak.harness import Soak


def kinds(soak: Soak) -> dict[str, Callable[[], None]]:
    """Each fault kind: starting it (and, for those that last, scheduling its end)."""

    def later(seconds: float, then: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, then)
        timer.daemon = True
        timer.start()
        soak.timers.append(timer)

    def kill(role: str) -> Callable[[], None]:
        def go() -> None:
            leader = soak.leader()
            if leader is None:
                return
            name = leader if role == "leader" else ({"a", "b"} - {leader}).pop()
            soak.replicas[name].signal(signal.SIGKILL)

        return go

    def pause_leader() -> None:
        leader = soak.leader()
        if leader is not None:
            soak.replicas[leader].signal(signal.SIGSTOP)
            later(3 * LEASE_S, lambda: soak.replicas[leader].signal(signal.SIGCONT))

    def pause(proc: world.Process, seconds: float) -> Callable[[], None]:
        def go() -> None:
            proc.signal(signal.SIGSTOP)
            later(seconds, lambda: proc.signal(signal.SIGCONT))

        return go

    def cut(gate: world.Gate, seconds: float) -> Callable[[], None]:
        def go() -> None:
            gate.shut()
            later(seconds, gate.open)

        return go

    def cloud(seconds: float, **faults: Any) -> Callable[[], None]:
        def go() -> None:
            until = datetime.now(UTC) + timedelta(seconds=seconds)
            soak.clouds.set_faults(**{k: (until if v == "until" else v) for k, v in faults.items()})
            if "failure_rate" in faults:
                later(seconds, lambda: soak.clouds.set_faults(failure_rate=0.0))

        return go

    return {
        "kill_leader": kill("leader"),
        "kill_follower": kill("follower"),
        "pause_leader_past_lease": pause_leader,
        # Past the lease (the leader steps down), except in a memory run, which keeps its leader.
        "database_refuses": cut(soak.db_gate, 5 if soak.settings.kills else LEASE_S - 1),
        "apiserver_paused": pause(soak.onprem_proc, 4),
        "remote_unreachable_briefly": cut(soak.remote_gate, 3),
        "remote_unreachable_past_grace": cut(soak.remote_gate, REMOTE_GRACE.total_seconds() + 5),
        "launches_fail": cloud(15, failure_rate=0.7),
        "capacity_refused": cloud(10, capacity_refused_until="until"),
        "throttled": cloud(6, throttled_until="until", retry_after_s=2.0),
        "slow_launches": cloud(15, slow_until="until", slow_factor=8.0),
        "spot_interruption": lambda: interrupt(soak),
        "pool_deleted_out_of_band": lambda: delete_out_of_band(soak),
    }


def provider(soak: Soak, target: str) -> SimProvider:
    cloud, region = ("aws", "eu-central-1") if target == "sim-aws" else ("gcp", "europe-west4")
    return SimProvider(
        soak.clouds,
        target=target,
        cloud=cloud,  # type: ignore[arg-type]
        region=region,
        offers=lambda: [],
        kube=soak.remote,  # as an operator would, from outside the gate
    )


def ours(soak: Soak, spot: bool = False) -> list[tuple[str, str]]:
    return [
        (p["target"], p["spec"]["name"])
        for p in soak.checker.cloud().get("pools", [])
        if p["tags"].get(TAG_OWNER) == INSTALLATION
        and not p["deleted"]
        and (not spot or p["spec"]["offer"]["capacity"] == "spot")
    ]


def interrupt(soak: Soak) -> None:
    pools = ours(soak, spot=True)
    if pools:
        target, name = soak.rng.choice(pools)
        # burst may delete it between the look and the reclaim (it killed the injector once)
        with contextlib.suppress(PoolNotFound):
            provider(soak, target).interrupt(name)


def delete_out_of_band(soak: Soak) -> None:
    pools = ours(soak)
    if pools:
        target, name = soak.rng.choice(pools)
        provider(soak, target).delete_pool(name, by="operator")


def foreign_pool(soak: Soak) -> None:
    """Another installation's pool, named like ours: burst must never touch it."""
    offer = OfferKey("aws", "eu-central-1", "p3.2xlarge", "on-demand", "V100", 1)
    spec = PoolSpec(
        name=f"{INSTALLATION}-pool-x",
        offer=offer,
        nodes=1,
        owner="soak-other",
        policy="x",
        epoch=1,
    )
    provider(soak, "sim-aws").create_pool(spec, "other-token")
