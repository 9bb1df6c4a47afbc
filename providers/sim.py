"""A simulated cloud: GPU node pools that take minutes to appear, sometimes fail, run out of
capacity, and lose spot nodes, all on a Clock and reproducible from a seed.

`burst demo` and the policy simulator burst into it; the tests drive it with a FakeClock. Given a
state file, the world lives in that file rather than in the process, as a real cloud outlives the
service that calls it: `burst serve` replicas that are killed and restarted find their pools
again, and the soak harness (tests/soak) reads the pools, their nodes' lifetimes and what was
deleted (for an hour after it ended), and sets the faults the cloud shows (failed launches,
capacity refusals, throttling, slow launches, spot interruptions) in the same file. Given a
Kubernetes API client for a (sandbox) cluster, it registers each pool's nodes there when they
become ready, with the labels, taints and GPU capacity a real node would have, and removes them
when the pool shrinks, is deleted, or a spot node is interrupted. It talks to that cluster only
through the Kubernetes API.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from urllib3.exceptions import HTTPError

from burst.clock import Clock
from burst.cloud.provider import (
    CapacityUnavailable,
    Instance,
    InvalidRequest,
    Pool,
    PoolNotFound,
    PoolPhase,
    PoolSpec,
    Throttled,
)
from burst.kube.nodes import gpu_node_manifest
from burst.model import GPU_PRODUCTS, TAG_OWNER, Cloud, Offer, OfferKey


@dataclass(frozen=True)
class Latency:
    """Provisioning time of a GPU pool: log-normal (a heavy right tail), capped."""

    median_s: float
    sigma: float
    cap_s: float

    def sample(self, rng: random.Random) -> float:
        return min(self.cap_s, self.median_s * math.exp(rng.gauss(0.0, self.sigma)))


# Managed GPU node pools take minutes, sometimes tens of minutes, to become schedulable.
LATENCY: Mapping[Cloud, Latency] = {
    "aws": Latency(median_s=360, sigma=0.5, cap_s=40 * 60),
    "gcp": Latency(median_s=300, sigma=0.45, cap_s=35 * 60),
    "azure": Latency(median_s=420, sigma=0.6, cap_s=45 * 60),
}


@dataclass
class SimSettings:
    speed: float = 1.0  # latencies are divided by this (the demo runs sped up)
    failure_rate: float = 0.0  # chance that a pool's launch fails
    spot_interruptions_per_hour: float = 0.0  # per spot node
    capacity: Mapping[OfferKey, int] = field(
        default_factory=dict
    )  # max nodes per offer; absent: unlimited
    latency: Mapping[Cloud, Latency] = field(default_factory=lambda: dict(LATENCY))


@dataclass
class Faults:
    """What the cloud does wrong for a while, set by a test harness in the state file."""

    capacity_refused_until: datetime | None = None  # every launch and growth refused
    throttled_until: datetime | None = None  # every call answered 429
    retry_after_s: float = 2.0
    slow_until: datetime | None = None  # launches take `slow_factor` times as long
    slow_factor: float = 1.0


@dataclass
class _Node:
    name: str
    ready_at: datetime
    interrupt_at: datetime | None
    registered: bool = False
    launched: datetime | None = None  # billed from here
    ended: datetime | None = None  # to here (removed, interrupted or deleted with its pool)
    ended_by: str = ""  # "shrunk", "interrupted", or who deleted its pool


@dataclass
class _Pool:
    spec: PoolSpec
    target: str
    created: datetime
    tags: dict[str, str]
    nodes: list[_Node]
    fails_at: datetime | None
    deleted: bool = False
    serial: int = 0
    gone: list[_Node] = field(default_factory=list)  # nodes removed, kept for their bills
    deleted_by: str = ""  # "burst", or who else deleted it
    deleted_at: datetime | None = None


# How long the cloud answers for what ended: EC2 lists a terminated instance "for approximately
# one hour" (TerminateInstances API reference); a deleted node group is not found at all (EKS
# DescribeNodegroup: ResourceNotFoundException). Then it is forgotten: a long run's state stays
# the size of what lives.
REMEMBERED = timedelta(hours=1)


class SimCloud:
    """The simulated world behind every sim target: one clock, one random stream, all pools."""

    def __init__(
        self,
        clock: Clock,
        seed: int = 0,
        settings: SimSettings | None = None,
        state: Path | None = None,
    ) -> None:
        self.clock = clock
        self.settings = settings or SimSettings()
        self.faults = Faults()
        self._rng = random.Random(seed)  # noqa: S311 (simulation, not security)
        self._pools: dict[tuple[str, str], _Pool] = {}
        self._lock = threading.RLock()
        self.interruptions = 0
        self.created = 0  # pools ever created, those forgotten included
        self.state = state
        self._inside = False  # within shared(): the file is locked and loaded already
        self.stale_nodes: list[str] = []  # Nodes of gone instances the cluster still lists

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """The world, read from its state file (if any) and written back, under a file lock
        that other processes on the same file take too."""
        with self._lock:
            if self._inside or self.state is None:
                if not self._inside:
                    self._forget_past()
                yield
                return
            self._inside = True
            with open(f"{self.state}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                from providers import sim_state

                if self.state.exists():
                    sim_state.load(self, json.loads(self.state.read_text()))
                self._forget_past()
                try:
                    yield
                finally:
                    tmp = self.state.with_name(self.state.name + ".tmp")
                    tmp.write_text(json.dumps(sim_state.dump(self)))
                    os.replace(tmp, self.state)  # readers see the old state or the new one
                    self._inside = False

    def _forget_past(self) -> None:  # pools deleted, and nodes ended, longer than REMEMBERED ago
        since = self.clock.now() - REMEMBERED
        for key, pool in list(self._pools.items()):
            if pool.deleted_at is not None and pool.deleted_at < since:
                del self._pools[key]
            else:
                pool.gone = [n for n in pool.gone if n.ended is None or n.ended >= since]

    def set_faults(self, **faults: Any) -> None:
        """Change what the cloud does wrong (Faults' fields, SimSettings' numbers), from now."""
        with self.shared():
            for key, value in faults.items():
                setattr(self.faults if hasattr(self.faults, key) else self.settings, key, value)

    def _delay(self, cloud: Cloud) -> timedelta:
        seconds = self.settings.latency[cloud].sample(self._rng) / self.settings.speed
        slow = self.faults.slow_until
        if slow is not None and self.clock.now() < slow:
            seconds *= self.faults.slow_factor
        return timedelta(seconds=seconds)

    def _misbehave(self, growth: bool, what: str) -> None:
        """Raise what the harness set the cloud to answer now, if anything."""
        now = self.clock.now()
        throttled = self.faults.throttled_until
        if throttled is not None and now < throttled:
            raise Throttled("Rate exceeded (simulated)", retry_after=self.faults.retry_after_s)
        refused = self.faults.capacity_refused_until
        if growth and refused is not None and now < refused:
            raise CapacityUnavailable(f"no capacity for {what} (simulated outage)")

    def _interrupt_at(self, offer: OfferKey, ready_at: datetime) -> datetime | None:
        rate = self.settings.spot_interruptions_per_hour
        if offer.capacity != "spot" or rate <= 0:
            return None
        return ready_at + timedelta(hours=self._rng.expovariate(rate))

    def _new_node(self, pool: _Pool, ready_at: datetime) -> _Node:
        pool.serial += 1
        interrupt_at = self._interrupt_at(pool.spec.offer, ready_at)
        return _Node(
            f"{pool.spec.name}-{pool.serial}", ready_at, interrupt_at, launched=self.clock.now()
        )

    def _end(self, pool: _Pool, node: _Node, why: str) -> None:
        node.ended, node.ended_by = self.clock.now(), why
        pool.gone.append(node)

    def pools_created(self) -> int:
        """Pools ever created (a repeated create with the same token is the same pool)."""
        with self.shared():
            return self.created

    def nodes_in_use(self, offer: OfferKey) -> int:
        return sum(
            len(p.nodes) for p in self._pools.values() if p.spec.offer == offer and not p.deleted
        )


class SimProvider:
    """One simulated target: a cluster in a region of a simulated `cloud`."""

    name = "sim"

    def __init__(
        self,
        world: SimCloud,
        *,
        target: str,
        cloud: Cloud,
        region: str,
        offers: Callable[[], list[Offer]],
        kube: Any = None,
    ) -> None:
        self.world, self.target, self.cloud, self.region = world, target, cloud, region
        self._offers = offers
        self._kube = kube  # kubernetes.client.ApiClient of the target's cluster, or None

    def offers(self) -> list[Offer]:
        return [o for o in self._offers() if o.cloud == self.cloud and o.region == self.region]

    # -- the clock moves things on --

    def _advance(self, pool: _Pool) -> None:
        """Interrupt spot nodes whose time came (a replacement boots) and sync the cluster."""
        now = self.world.clock.now()
        if self.world.stale_nodes and self._kube is not None:
            self._forget_stale()
        for i, node in enumerate(list(pool.nodes)):
            if node.interrupt_at is not None and node.interrupt_at <= now:
                self._deregister(node)
                self.world._end(pool, node, "interrupted")
                self.world.interruptions += 1
                pool.nodes[i] = self.world._new_node(pool, now + self.world._delay(self.cloud))
        if pool.fails_at is None:
            for node in pool.nodes:
                if node.ready_at <= now and not node.registered:
                    self._register(pool, node)

    def _phase(self, pool: _Pool) -> tuple[PoolPhase, str]:
        now = self.world.clock.now()
        if pool.fails_at is not None and pool.fails_at <= now:
            return "failed", "simulated launch failure: instances did not join the cluster"
        if pool.nodes and all(n.ready_at <= now for n in pool.nodes):
            return "ready", ""
        if not pool.nodes and pool.created <= now:
            return "ready", ""
        return ("creating" if all(n.ready_at > now for n in pool.nodes) else "resizing"), ""

    def _to_pool(self, pool: _Pool) -> Pool:
        self._advance(pool)
        phase, message = self._phase(pool)
        ready = sum(1 for n in pool.nodes if n.ready_at <= self.world.clock.now())
        return Pool(
            name=pool.spec.name,
            phase=phase,
            nodes=len(pool.nodes),
            instance_type=pool.spec.offer.instance_type,
            capacity=pool.spec.offer.capacity,
            tags=dict(pool.tags),
            external_id=f"sim://{self.target}/{pool.spec.name}",
            message=message or f"{ready}/{len(pool.nodes)} nodes ready",
            # As a cloud's instance API reports them, ended ones included for a while (EC2
            # DescribeInstances: LaunchTime, and a terminated instance stays listed about an
            # hour; GKE managedInstanceGroups.listManagedInstances; AKS scale set VMs).
            instances=tuple(
                Instance(n.name, n.launched or pool.created, n.ended)
                for n in [*pool.gone, *pool.nodes]
            ),
        )

    def _find(self, name: str) -> _Pool:
        pool = self.world._pools.get((self.target, name))
        if pool is None or pool.deleted:
            raise PoolNotFound(f"no pool {name} in {self.target}")
        return pool

    # -- Provider --

    def create_pool(self, spec: PoolSpec, token: str) -> Pool:
        with self.world.shared():
            existing = self.world._pools.get((self.target, spec.name))
            if existing is not None and not existing.deleted:
                if existing.tags.get(TAG_OWNER) != spec.owner:
                    raise InvalidRequest(f"a pool named {spec.name} exists and is not burst's")
                return self._to_pool(existing)
            self.world._misbehave(True, f"{spec.nodes} {spec.offer.instance_type}")
            limit = self.world.settings.capacity.get(spec.offer)
            if limit is not None and self.world.nodes_in_use(spec.offer) + spec.nodes > limit:
                raise CapacityUnavailable(
                    f"no capacity for {spec.nodes} more {spec.offer.instance_type} "
                    f"in {self.region} (simulated)"
                )
            now = self.world.clock.now()
            delay = self.world._delay(self.cloud)
            fails = self.world._rng.random() < self.world.settings.failure_rate
            pool = _Pool(
                spec, self.target, now, spec.tags(token), [], now + delay if fails else None
            )
            pool.nodes = [self.world._new_node(pool, now + delay) for _ in range(spec.nodes)]
            self.world._pools[(self.target, spec.name)] = pool
            self.world.created += 1
            return self._to_pool(pool)

    def get_pool(self, name: str) -> Pool:
        with self.world.shared():
            self.world._misbehave(False, "")
            return self._to_pool(self._find(name))

    def resize_pool(self, name: str, nodes: int) -> Pool:
        with self.world.shared():
            pool = self._find(name)
            now = self.world.clock.now()
            growth = nodes - len(pool.nodes)
            self.world._misbehave(growth > 0, f"{growth} more {pool.spec.offer.instance_type}")
            while len(pool.nodes) > nodes:
                node = pool.nodes.pop()
                self._deregister(node)
                self.world._end(pool, node, "shrunk")
            limit = self.world.settings.capacity.get(pool.spec.offer)
            if (
                growth > 0
                and limit is not None
                and self.world.nodes_in_use(pool.spec.offer) + growth > limit
            ):
                raise CapacityUnavailable(
                    f"no capacity for {growth} more {pool.spec.offer.instance_type} (simulated)"
                )
            for _ in range(growth):
                pool.nodes.append(self.world._new_node(pool, now + self.world._delay(self.cloud)))
            return self._to_pool(pool)

    def delete_pool(self, name: str, by: str = "burst") -> None:
        """Delete a pool; `by` someone other than burst for a deletion out of band."""
        with self.world.shared():
            self.world._misbehave(False, "")
            pool = self.world._pools.get((self.target, name))
            if pool is None or pool.deleted:
                return
            for node in pool.nodes:
                self._deregister(node)
                self.world._end(pool, node, by)
            pool.nodes = []
            pool.deleted, pool.deleted_by = True, by
            pool.deleted_at = self.world.clock.now()

    def interrupt(self, name: str) -> bool:
        """Reclaim one of a spot pool's ready nodes now (a replacement boots); False if none."""
        with self.world.shared():
            pool = self._find(name)
            now = self.world.clock.now()
            for node in pool.nodes:
                if pool.spec.offer.capacity == "spot" and node.ready_at <= now:
                    node.interrupt_at = now
                    self._advance(pool)
                    return True
            return False

    def cluster_state(self) -> tuple[bool, str]:
        return True, f"simulated {self.cloud} cluster in {self.region}"

    def list_pools(self, owner: str) -> list[Pool]:
        with self.world.shared():
            self.world._misbehave(False, "")
            return [
                self._to_pool(p)
                for (target, _), p in sorted(self.world._pools.items())
                if target == self.target and not p.deleted and p.tags.get(TAG_OWNER) == owner
            ]

    def ended_instances(self, name: str) -> tuple[Instance, ...] | None:
        """A deleted pool's instances, for an hour after its deletion as EC2 lists terminated
        instances (TerminateInstances API reference: "for approximately one hour")."""
        with self.world.shared():
            self.world._misbehave(False, "")
            pool = self.world._pools.get((self.target, name))
            if pool is None or not pool.deleted:
                return None
            ends = [n.ended for n in pool.gone if n.ended is not None]
            if ends and self.world.clock.now() - max(ends) > REMEMBERED:
                return None
            return tuple(Instance(n.name, n.launched or pool.created, n.ended) for n in pool.gone)

    # -- the target's Kubernetes cluster --

    def _register(self, pool: _Pool, node: _Node) -> None:
        """The node joins the cluster; one that cannot reach it yet joins on a later look, as a
        kubelet keeps trying (kubernetes pkg/kubelet/kubelet_node_status.go:
        registerWithAPIServer retries with a growing back-off until the Node is created)."""
        if self._kube is None:
            node.registered = True
            return
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        manifest: Any = node_manifest(pool.spec, node.name, self.cloud, self.region)
        try:
            client.CoreV1Api(self._kube).create_node(manifest, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:  # 409: registered by a process killed before it wrote so
                return
        except (OSError, HTTPError):  # the cluster unreachable: urllib3's errors
            return
        node.registered = True

    def _deregister(self, node: _Node) -> None:
        """The node leaves the cluster; if the cluster cannot be told now, it is told later (as
        the cloud's node lifecycle controller removes the Node of a gone instance: "Cloud
        Controller Manager", kubernetes.io/docs/concepts/architecture/cloud-controller/)."""
        if not node.registered:
            return
        node.registered = False
        if self._kube is not None:
            self.world.stale_nodes.append(node.name)
            self._forget_stale()

    def _forget_stale(self) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        for name in list(self.world.stale_nodes):
            try:
                client.CoreV1Api(self._kube).delete_node(name, _preload_content=False)
            except ApiException as exc:
                if exc.status != 404:
                    return
            except (OSError, HTTPError):
                return
            self.world.stale_nodes.remove(name)


# The taints each managed service puts on its GPU and spot nodes itself, whatever burst asks for:
# GKE taints GPU nodes nvidia.com/gpu=present:NoSchedule ("Run GPUs in GKE Standard node pools");
# AKS taints spot nodes kubernetes.azure.com/scalesetpriority=spot:NoSchedule ("Add an Azure Spot
# node pool to an AKS cluster").
_GKE_GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
_AKS_SPOT = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "value": "spot",
    "effect": "NoSchedule",
}
CLOUD_TAINTS: dict[tuple[str, str], tuple[dict[str, str], ...]] = {
    ("gcp", "on-demand"): (_GKE_GPU,),
    ("gcp", "spot"): (_GKE_GPU,),
    ("azure", "spot"): (_AKS_SPOT,),
}


def node_manifest(spec: PoolSpec, name: str, cloud: Cloud, region: str) -> dict[str, Any]:
    """The Node a pool's instance registers as: pool, instance and GPU labels, taints, GPU capacity."""
    offer = spec.offer
    labels = {
        **spec.node_labels(),
        "node.kubernetes.io/instance-type": offer.instance_type,
        "topology.kubernetes.io/region": region,
        "burst.dev/capacity-type": offer.capacity,
        "burst.dev/cloud": cloud,
    }
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in spec.node_taints()]
    for own in CLOUD_TAINTS.get((cloud, offer.capacity), ()):
        if not any(t["key"] == own["key"] and t["effect"] == own["effect"] for t in taints):
            taints.append(dict(own))
    return gpu_node_manifest(
        name,
        product=GPU_PRODUCTS.get(offer.accelerator, f"NVIDIA-{offer.accelerator}"),
        gpus=offer.gpus,
        labels=labels,
        taints=taints,
        runtime="sim",
    )
