"""The simulated cloud's state file: the world of providers/sim.py as JSON, so that it outlives
the processes that use it (see SimCloud.shared). Written and read only under that file's lock."""

from __future__ import annotations

import random
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from burst.cloud.provider import PoolSpec, Taint
from burst.model import OfferKey
from providers.sim import Faults, _Node, _Pool

if TYPE_CHECKING:
    from providers.sim import SimCloud


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _dump_node(n: _Node) -> dict[str, Any]:
    times = ("ready_at", "interrupt_at", "launched", "ended")
    return {k: (v.isoformat() if k in times and v else v) for k, v in asdict(n).items()}


def _load_node(d: dict[str, Any]) -> _Node:
    times = ("ready_at", "interrupt_at", "launched", "ended")
    fields: dict[str, Any] = {k: (_time(v) if k in times else v) for k, v in d.items()}
    return _Node(**fields)


def dump(world: SimCloud) -> dict[str, Any]:
    pools = []
    for (target, _), p in world._pools.items():
        spec = asdict(p.spec)
        spec["labels"] = dict(p.spec.labels)
        pools.append(
            {
                "target": target,
                "spec": spec,
                "created": p.created.isoformat(),
                "tags": p.tags,
                "nodes": [_dump_node(n) for n in p.nodes],
                "gone": [_dump_node(n) for n in p.gone],
                "fails_at": p.fails_at.isoformat() if p.fails_at else None,
                "deleted": p.deleted,
                "deleted_by": p.deleted_by,
                "deleted_at": p.deleted_at.isoformat() if p.deleted_at else None,
                "serial": p.serial,
            }
        )
    faults = {
        k: (v.isoformat() if isinstance(v, datetime) else v)
        for k, v in asdict(world.faults).items()
    }
    settings = world.settings
    return {
        "rng": _rng_state(world._rng),
        "interruptions": world.interruptions,
        "created": world.created,
        "stale_nodes": world.stale_nodes,
        "settings": {
            "speed": settings.speed,
            "failure_rate": settings.failure_rate,
            "spot_interruptions_per_hour": settings.spot_interruptions_per_hour,
        },
        "faults": faults,
        "pools": pools,
    }


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def load(world: SimCloud, state: dict[str, Any]) -> None:
    if "rng" in state:
        version, internal, gauss = state["rng"]
        world._rng.setstate((version, tuple(internal), gauss))
    world.interruptions = state.get("interruptions", 0)
    world.created = state.get("created", len(state.get("pools") or []))
    world.stale_nodes = list(state.get("stale_nodes") or [])
    for key, value in (state.get("settings") or {}).items():
        setattr(world.settings, key, value)
    faults: dict[str, Any] = {
        k: (_time(v) if k.endswith("_until") else v) for k, v in (state.get("faults") or {}).items()
    }
    world.faults = Faults(**faults)
    world._pools = {}
    for p in state.get("pools") or []:
        spec = dict(p["spec"])
        spec["offer"] = OfferKey(**spec["offer"])
        spec["taints"] = tuple(Taint(**t) for t in spec["taints"])
        spec["zones"] = tuple(spec["zones"])
        created = _time(p["created"])
        assert created is not None
        world._pools[(p["target"], spec["name"])] = _Pool(
            PoolSpec(**spec),
            p["target"],
            created,
            p["tags"],
            [_load_node(n) for n in p["nodes"]],
            _time(p["fails_at"]),
            p["deleted"],
            p["serial"],
            [_load_node(n) for n in p["gone"]],
            p["deleted_by"],
            _time(p.get("deleted_at")),
        )
