"""The pools a plan can place workloads in: the open ones it found and the ones it plans, each with
its free GPUs per node; and the deterministic name a new pool gets."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from burst.cloud.catalog import Catalog
from burst.config import TargetSpec
from burst.decide.candidates import Candidate, interruptible
from burst.decide.wording import usd
from burst.model import Action, CreatePool, OfferKey, ResizePool, Workload


class Watcher(Protocol):
    """What keeps a summary of a pool's free room (reuse.py's blocks): told when it changes."""

    def changed(self, pool: OpenPool, free_max: int, free_total: int, nodes: int) -> None: ...


@dataclass
class OpenPool:
    """A pool workloads can be placed in during this plan: an existing one or one planned here."""

    name: str
    target: TargetSpec
    policy: str
    offer: OfferKey
    hourly_micros: int
    free: list[int]  # free GPUs per node
    ready_at: datetime
    existing: bool
    nodes_before: int
    created: datetime | None = None
    used: bool = False
    cost_micros: int = 0
    reasons: list[str] = field(default_factory=list)
    free_max: int = 0
    free_total: int = 0
    seq: int = 0  # the order it was opened in this plan: the last tie-break between pools
    unavailable: bool = False  # its offer is backed off: it takes work on its nodes, grows none
    interruptible: bool = False  # runs here are timed with spot restarts (expected_run)
    launch: timedelta = timedelta(0)  # how long a new node takes: the target's provisioning
    watchers: list[Watcher] = field(default_factory=list, repr=False, compare=False)
    _slots: dict[int, int] = field(default_factory=dict)  # pods that fit now, per pod size

    @property
    def nodes(self) -> int:
        return len(self.free)

    def extra_nodes_for(self, w: Workload) -> int | None:
        """How many empty nodes must be added for `w` to fit (0: it fits now); None: never.

        All pods of a workload are the same size, so first-fit places exactly the sum over nodes
        of free // per-pod GPUs; no search is needed.
        """
        per_pod = w.gpus_per_pod
        per_new_node = self.offer.gpus // per_pod
        if per_new_node == 0:
            return None
        slots = self._slots.get(per_pod)
        if slots is None:  # counted once per pod size until the pool changes: asked per workload
            slots = sum(f // per_pod for f in self.free) if self.free_max >= per_pod else 0
            self._slots[per_pod] = slots
        return max(0, -(-(w.pods - slots) // per_new_node))

    def fits(self, w: Workload) -> bool:
        return self.free_total >= w.gpus and self.extra_nodes_for(w) == 0

    def grow(self, nodes: int) -> None:
        self._refresh(self.free + [self.offer.gpus] * nodes)

    def place(self, w: Workload) -> None:
        placed = first_fit(self.free, w.gpus_per_pod, w.pods)
        assert placed is not None
        self.used = True
        self._refresh(placed)

    def _refresh(self, free: list[int]) -> None:
        before = (self.free_max, self.free_total, len(self.free))
        self.free = free
        self.free_max = max(free, default=0)
        self.free_total = sum(free)
        self._slots.clear()
        for watcher in self.watchers:
            watcher.changed(self, *before)

    def __post_init__(self) -> None:
        self.interruptible = interruptible(self.target, self.offer.capacity)
        self.launch = self.target.provisioning
        self._refresh(self.free)


def first_fit(free: list[int], per_pod: int, pods: int) -> list[int] | None:
    left = list(free)
    for _ in range(pods):
        for i, f in enumerate(left):
            if f >= per_pod:
                left[i] = f - per_pod
                break
        else:
            return None
    return left


def pool_name(c: Candidate, taken: Iterable[str]) -> str:
    """Deterministic: target, instance type, capacity and a generation one past any in use."""
    stem = (
        f"{c.target.name}-{c.offer.instance_type}-{'spot' if c.offer.capacity == 'spot' else 'od'}"
    )
    if c.offer.cloud == "gcp":
        stem += f"-{c.offer.gpus}x{c.offer.accelerator}"
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
    if len(stem) > 55:
        stem = stem[:46] + "-" + hashlib.sha256(stem.encode()).hexdigest()[:8]
    used = set(taken)
    generation = 1
    while f"{stem}-{generation}" in used:
        generation += 1
    return f"{stem}-{generation}"


def pool_actions(pools: Iterable[OpenPool], catalog: Catalog) -> list[Action]:
    """Create or resize, for every pool this plan placed work in."""
    out: list[Action] = []
    for pool in pools:
        if not pool.used:
            continue
        who = ", ".join(pool.reasons[:3]) + (
            f" and {len(pool.reasons) - 3} more" if len(pool.reasons) > 3 else ""
        )
        if not pool.existing:
            offer = catalog.get(pool.offer)
            assert offer is not None
            out.append(
                CreatePool(
                    pool.name,
                    pool.target.name,
                    pool.policy,
                    pool.offer,
                    pool.nodes,
                    offer.hourly,
                    f"for {who}",
                    usd(pool.cost_micros),
                )
            )
        elif pool.nodes > pool.nodes_before:
            out.append(
                ResizePool(
                    pool.name,
                    pool.nodes,
                    f"{pool.nodes_before} -> {pool.nodes} nodes for {who}",
                    usd(pool.cost_micros),
                )
            )
    return out
