"""The configuration a comparison replays, varied: one policy's trigger (its safety margin, its
price on waiting), the on-prem cluster's queueing, and a margin chosen against the runtime error
a replay measured. `burst simulate` applies them to the configuration before compare.py replays
it; the sweep varies them per replay.
"""

from __future__ import annotations

import math
from dataclasses import replace as replace_dataclass
from datetime import timedelta
from typing import Any

from burst.config import Config
from burst.sim.state import Outcome


def with_margin(config: Config, policy: str, margin: timedelta) -> Config:
    """The configuration with one policy's deadline safety margin changed."""
    return with_trigger(config, policy, deadline_safety_margin=margin)


def with_trigger(config: Config, policy: str, **changes: Any) -> Config:
    """The configuration with one policy's trigger changed."""
    p = config.policies[policy]
    trigger = p.spec.trigger.model_copy(update=changes)
    changed = p.model_copy(update={"spec": p.spec.model_copy(update={"trigger": trigger})})
    return replace_dataclass(config, policies={**config.policies, policy: changed})


def with_queueing(config: Config, queueing: str) -> Config:
    """The configuration with the on-prem cluster's queueing changed."""
    assert config.service is not None
    spec = config.service.spec
    on_prem = spec.on_prem.model_copy(update={"queueing": queueing})
    service = config.service.model_copy(
        update={"spec": spec.model_copy(update={"on_prem": on_prem})}
    )
    return replace_dataclass(config, service=service)


def measured_margin(outcome: Outcome) -> timedelta | None:
    """The safety margin that covers nine runtimes in ten of those the decision was told, as the
    replay measured them (how much longer they ran than told, to the minute above); None when
    no job was told a runtime (`--runtimes none`: the policy's default, whose error is not the
    jobs')."""
    if outcome.overrun_p90_s is None:
        return None
    return timedelta(minutes=math.ceil(outcome.overrun_p90_s / 60))
