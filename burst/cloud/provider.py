"""The Provider contract: what burst asks of a cloud, and the typed errors a cloud answers with.

provision.py and teardown.py drive pools through this protocol; providers/aws.py, gcp.py, azure.py
and sim.py implement it, one instance per burst target (a managed cluster in a region). No SDK
exception leaves a provider: each is mapped to one of the errors below, which say whether trying
again can help.

Contract:
- `create_pool(spec, token)` is idempotent: the same pool name (and token) never makes a second
  pool; if the pool already exists and is ours it is returned.
- `delete_pool(name)` is idempotent: a pool that is already gone counts as deleted.
- `list_pools(owner)` lists only pools tagged with our owner id; nothing else is ever listed,
  resized or deleted: that is what makes orphan collection safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, TypeVar

from burst.model import (
    NODE_POOL_LABEL,
    TAG_EPOCH,
    TAG_OWNER,
    TAG_POLICY,
    TAG_POOL,
    TAG_TOKEN,
    Offer,
    OfferKey,
)

PoolPhase = Literal["creating", "ready", "resizing", "deleting", "failed"]


class ProviderError(Exception):
    """A cloud said no. `retryable`: the same call may succeed later."""

    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CapacityUnavailable(ProviderError):
    """The cloud has no capacity for this offer now: try the next offer, back this one off."""

    retryable = True


class QuotaExceeded(ProviderError):
    """Our account's quota does not allow it; waiting will not help until an admin raises it."""


class Throttled(ProviderError):
    """Too many requests: try again after `retry_after` seconds."""

    retryable = True

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PoolNotFound(ProviderError):
    pass


class ProviderUnavailable(ProviderError):
    """A transient failure: a timeout, a 5xx, a dropped connection."""

    retryable = True


class InvalidRequest(ProviderError):
    """The request can never succeed as it is (bad parameters, a name taken by someone else)."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


@dataclass(frozen=True)
class PoolSpec:
    """What to create: a logical pool name, an offer, a size, and what to put on the nodes."""

    name: str
    offer: OfferKey
    nodes: int
    owner: str
    policy: str
    epoch: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()  # more than the pool's own taint (node_taints)
    zones: tuple[str, ...] = ()  # where the pool's nodes go (GKE: one zone with the GPU)
    spot_max_price_usd: str | None = None  # per node-hour, as a decimal string (Azure)

    def tags(self, token: str) -> dict[str, str]:
        return {
            TAG_OWNER: self.owner,
            TAG_POOL: self.name,
            TAG_POLICY: self.policy,
            TAG_EPOCH: str(self.epoch),
            TAG_TOKEN: token,
        }

    def node_labels(self) -> dict[str, str]:
        return {NODE_POOL_LABEL: self.name, **self.labels}

    def node_taints(self) -> tuple[Taint, ...]:
        """burst's own taint on every node of the pool, which only the pool's copies tolerate:
        no other pod of the cloud cluster lands on nodes burst pays for. (No nvidia.com/gpu taint:
        GKE adds it to GPU nodes itself and refuses a second; EKS and AKS add none.)"""
        return (Taint(NODE_POOL_LABEL, self.name), *self.taints)


@dataclass(frozen=True)
class Instance:
    """One node instance of a pool as the cloud bills it: from its launch to its end."""

    id: str
    launched: datetime
    ended: datetime | None = None  # None: still running


@dataclass(frozen=True)
class Pool:
    """A pool as the cloud reports it."""

    name: str  # burst's logical name (from our tag), not necessarily the cloud's
    phase: PoolPhase
    nodes: int
    instance_type: str
    capacity: Literal["on-demand", "spot"]
    tags: Mapping[str, str] = field(default_factory=dict)
    external_id: str = ""
    message: str = ""
    # Its instances, running and lately ended, where the cloud's API says (the simulated
    # clouds); None where burst asks only for the node count, and bills from its changes.
    instances: tuple[Instance, ...] | None = None

    @property
    def owner(self) -> str | None:
        return self.tags.get(TAG_OWNER)


class Provider(Protocol):
    name: str

    def offers(self) -> list[Offer]: ...

    def create_pool(self, spec: PoolSpec, token: str) -> Pool: ...

    def get_pool(self, name: str) -> Pool: ...

    def resize_pool(self, name: str, nodes: int) -> Pool: ...

    def delete_pool(self, name: str) -> None: ...

    def list_pools(self, owner: str) -> list[Pool]: ...

    def ended_instances(self, name: str) -> tuple[Instance, ...] | None:
        """A pool that is gone: its instances with their ends, as the cloud's instance API still
        lists them for a while (EC2: "Terminated instances remain visible after termination (for
        approximately one hour)", TerminateInstances API reference); None where the adapter does
        not ask, and the pool is billed to when burst saw it gone."""
        ...


class TokenBucket:
    """Client-side throttle per provider: at most `rate` calls a second, bursts up to `burst`."""

    def __init__(
        self,
        rate: float,
        burst: int,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._sleep, self._monotonic = sleep, monotonic
        self._last = monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            now = self._monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            wait = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate
            self._tokens -= 1
        if wait > 0:
            self._sleep(wait)


T = TypeVar("T")


def with_retries(
    call: Callable[[], T],
    *,
    attempts: int = 4,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `call`, retrying retryable provider errors with exponential back-off.

    A Throttled error's `retry_after` wins over the back-off when it is longer. Capacity errors
    are not retried here: the decision should move on to the next offer instead.
    """
    delay = base_delay
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except (Throttled, ProviderUnavailable) as exc:
            if attempt == attempts:
                raise
            wait = max(delay, exc.retry_after) if isinstance(exc, Throttled) else delay
            sleep(min(wait, max_delay))
            delay = min(delay * 2, max_delay)
    raise AssertionError("unreachable")
