"""The offers a workload could run on: per capacity type and target, the catalog's node shapes
that hold its pods under the policy's price cap and node limit, cheapest (price x nodes) first.
Also how long a run takes there: on spot with a known interruption rate, with its expected restarts.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from burst.amounts import Money
from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, TargetSpec
from burst.decide.caps import Rates
from burst.decide.snapshot import LONGEST
from burst.model import CapacityType, Offer, Workload


@dataclass(frozen=True, slots=True)
class Candidate:
    target: TargetSpec
    offer: Offer
    pods_per_node: int
    nodes: int


Shape = dict[CapacityType, dict[str, list[Candidate]]]
_Seen = tuple[BurstPolicy, object, Rates, Shape]
# Across plans too: the candidates depend only on the catalog, the policy, the targets and the
# rates, which a service or a simulation keeps for thousands of plans.
_ACROSS_PLANS: weakref.WeakKeyDictionary[Catalog, dict[tuple[object, ...], _Seen]] = (
    weakref.WeakKeyDictionary()
)


def capacities(spot_ok: bool) -> tuple[CapacityType, ...]:
    """The capacity types a run may be offered: on demand, and spot where it is allowed."""
    return ("on-demand", "spot") if spot_ok else ("on-demand",)


def pods_per_node(offer: Offer, w: Workload) -> int:
    fit = offer.gpus // w.gpus_per_pod
    if w.cpu_per_pod > 0:
        fit = min(fit, int(offer.vcpus // w.cpu_per_pod))
    if w.memory_gib_per_pod > 0:
        fit = min(fit, int(offer.memory_gib // w.memory_gib_per_pod))
    return fit


NEVER_H = LONGEST.total_seconds() / 3600  # no runtime is longer


def interruptible(target: TargetSpec, capacity: CapacityType) -> bool:
    """Whether runs there are timed with restarts: spot where the target knows its rate."""
    return capacity == "spot" and bool(target.spot_interruptions_per_hour)


def expected_run(
    target: TargetSpec, capacity: CapacityType, nodes: int, runtime: timedelta
) -> tuple[timedelta, float]:
    """Expected running time and restarts of a run of `runtime` on `nodes` nodes. On spot where the
    target's interruption rate is known, each interruption restarts the run from scratch: at m
    interruptions per hour across the nodes, it takes (e^(m T) - 1) / m with e^(m T) - 1 restarts."""
    if not interruptible(target, capacity):
        return runtime, 0.0
    assert target.spot_interruptions_per_hour is not None
    per_hour = target.spot_interruptions_per_hour * nodes
    # A run expected to take past a decade never ends: its restarts are capped there, or a timedelta
    # of them (and of their relaunches) would overflow.
    restarts = min(
        math.expm1(min(per_hour * runtime.total_seconds() / 3600, 30.0)), NEVER_H * per_hour
    )
    return timedelta(hours=restarts / per_hour), restarts


def allowed_accelerators(policy: BurstPolicy, requested: str | None, catalog: Catalog) -> list[str]:
    """The GPUs a request may run on under `policy`: its substitutions, else itself."""
    subs = policy.spec.placement.accelerators
    if requested is None:
        merged = [a for values in subs.values() for a in values]
        return sorted(set(merged)) if merged else sorted(catalog.accelerators())
    return list(subs.get(requested, [requested]))


class Candidates:
    """Candidates per workload shape, cached for the plan and across plans."""

    def __init__(
        self,
        catalog: Catalog,
        targets: Mapping[str, TargetSpec],
        config_targets: Sequence[TargetSpec],
        rates: Rates,
    ) -> None:
        self.catalog, self.targets, self.config_targets, self.rates = (
            catalog,
            targets,
            config_targets,
            rates,
        )
        self._shapes: dict[tuple[object, ...], Shape] = {}

    def of(self, w: Workload, p: BurstPolicy) -> Shape:
        key = (
            p.metadata.name,
            w.accelerator,
            w.gpus_per_pod,
            w.pods,
            w.cpu_per_pod,
            w.memory_gib_per_pod,
        )
        cached = self._shapes.get(key)
        if cached is not None:
            return cached
        across = _ACROSS_PLANS.setdefault(self.catalog, {})
        seen = across.get(key)
        if (
            seen is not None
            and seen[0] is p
            and seen[1] is self.config_targets
            and seen[2] == self.rates
        ):
            found = seen[3]
        else:
            found = self._search(w, p)
            across[key] = (p, self.config_targets, self.rates, found)
        if any(name not in self.targets for lists in found.values() for name in lists):
            # A target left out of this plan (its cluster silent) is kept in the shared shape.
            found = {
                capacity: {n: c for n, c in lists.items() if n in self.targets}
                for capacity, lists in found.items()
            }
        self._shapes[key] = found
        return found

    def _search(self, w: Workload, p: BurstPolicy) -> Shape:
        spec = p.spec
        cap_usd = (
            self.rates.to_usd(Money.of(spec.limits.max_hourly_price, spec.limits.currency))
            if spec.limits.max_hourly_price is not None
            else None
        )
        accelerators = allowed_accelerators(p, w.accelerator, self.catalog)
        found: Shape = {"on-demand": {}, "spot": {}}
        configured = {t.name: t for t in self.config_targets}
        for name in sorted(spec.placement.targets):
            target = configured.get(name)
            if target is None:
                continue
            for offer in self.catalog.query(accelerators, regions={(target.cloud, target.region)}):
                if offer.gpus < w.gpus_per_pod or (
                    cap_usd is not None and offer.hourly.micros > cap_usd
                ):
                    continue
                per_node = pods_per_node(offer, w)
                if per_node < 1:
                    continue
                nodes = -(-w.pods // per_node)
                if nodes > spec.limits.max_nodes_per_pool:
                    continue
                found[offer.capacity].setdefault(name, []).append(
                    Candidate(target, offer, per_node, nodes)
                )
        for lists in found.values():
            for cands in lists.values():
                cands.sort(key=lambda c: (c.offer.hourly.micros * c.nodes, str(c.offer.key)))
        return found
