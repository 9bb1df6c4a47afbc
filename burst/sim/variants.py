"""The configuration a comparison replays, varied: one policy's trigger (its safety margin, its
price on waiting), the on-prem cluster's queueing, the targets as the simulated clouds are, and
a margin chosen against the runtime error a replay measured. `burst simulate` applies them to the configuration before compare.py replays
it; the sweep varies them per replay.
"""

from __future__ import annotations

import math
from dataclasses import replace as replace_dataclass
from datetime import timedelta
from typing import Any

from burst.config import Config
from burst.durations import DurationError, format_duration, parse_duration
from burst.sim.state import CloudModel, Outcome

# `--margin` chosen from a first replay: one duration, or a share of each runtime
MEASURED = ("measured", "measured-share")


def with_margin(config: Config, policy: str, margin: timedelta, share: float = 0.0) -> Config:
    """The configuration with one policy's deadline safety margin replaced: a fixed part and a
    share of each workload's runtime."""
    return with_trigger(config, policy, deadline_safety_margin=margin, deadline_safety_share=share)


def with_trigger(config: Config, policy: str, **changes: Any) -> Config:
    """The configuration with one policy's trigger changed."""
    return _with_spec_part(config, policy, "trigger", changes)


def with_placement(config: Config, policy: str, **changes: Any) -> Config:
    """The configuration with one policy's placement changed."""
    return _with_spec_part(config, policy, "placement", changes)


def with_teardown(config: Config, policy: str, **changes: Any) -> Config:
    """The configuration with one policy's teardown changed."""
    return _with_spec_part(config, policy, "teardown", changes)


def with_limits(config: Config, policy: str, **changes: Any) -> Config:
    """The configuration with one policy's limits changed."""
    return _with_spec_part(config, policy, "limits", changes)


def _with_spec_part(config: Config, policy: str, part: str, changes: dict[str, Any]) -> Config:
    p = config.policies[policy]
    varied = getattr(p.spec, part).model_copy(update=changes)
    changed = p.model_copy(update={"spec": p.spec.model_copy(update={part: varied})})
    return replace_dataclass(config, policies={**config.policies, policy: changed})


def with_queueing(config: Config, queueing: str) -> Config:
    """The configuration with the on-prem cluster's queueing changed."""
    assert config.service is not None
    on_prem = config.service.spec.on_prem.model_copy(update={"queueing": queueing})
    return _with_service_spec(config, on_prem=on_prem)


def stated(config: Config, clouds: CloudModel) -> Config:
    """The configuration with its targets stating the simulated clouds, where the model asks it
    (the ideal clouds): each launch takes the model's median latency (none there) and spot nodes
    are reclaimed at the model's rate (never there). Left as they
    were, the targets' estimates for real clouds (8 to 12 minutes by default, and the example's
    0.05 reclaims per spot node-hour) have burst plan for launches and restarts that these clouds
    do not have, keeping on-prem work that a pool would have started sooner."""
    if not clouds.restate_targets or config.service is None:
        return config
    targets = [
        t.model_copy(
            update={
                "provisioning_estimate": timedelta(seconds=clouds.latency[t.cloud].median_s),
                "spot_interruptions_per_hour": clouds.spot_interruptions_per_hour,
            }
        )
        for t in config.service.spec.targets
    ]
    return _with_service_spec(config, targets=targets)


def _with_service_spec(config: Config, **changes: Any) -> Config:
    assert config.service is not None
    spec = config.service.spec.model_copy(update=changes)
    return replace_dataclass(config, service=config.service.model_copy(update={"spec": spec}))


def measured_margin(outcome: Outcome) -> timedelta | None:
    """The safety margin that covers nine runtimes in ten of those the decision was told, as the
    replay measured them (how much longer they ran than told, to the minute above); None when
    no job was told a runtime (`--runtimes none`: the policy's default, whose error is not the
    jobs')."""
    if outcome.overrun_p90_s is None:
        return None
    return timedelta(minutes=math.ceil(outcome.overrun_p90_s / 60))


def measured_share(outcome: Outcome) -> float | None:
    """The share of its runtime that covers nine overruns in ten, each as a share of the
    runtime told (to the hundredth above); None when no job was told a runtime."""
    if outcome.overrun_share_p90 is None:
        return None
    return math.ceil(round(outcome.overrun_share_p90 * 100, 6)) / 100


def measured_runtime_share(outcome: Outcome) -> float | None:
    """The share of each runtime told that nine runs in ten reach, as a replay measured it (to
    the hundredth below, at most 1): what the deadline trigger may count of a runtime told and
    still burst only for deadlines a run that long would miss. None when no job was told a
    runtime."""
    if outcome.runtime_share_p10 is None:
        return None
    return min(1.0, max(0.01, math.floor(round(outcome.runtime_share_p10 * 100, 6)) / 100))


def parse_runtime_share(text: str) -> float:
    """`--deadline-runtime-share`: a share above 0 and at most 1."""
    share = _number(text)
    if not 0 < share <= 1:
        raise ValueError(
            f"--deadline-runtime-share: {text!r} is not a share above 0 and at most 1, "
            "nor 'measured'"
        )
    return share


def _number(text: str) -> float:
    """The number `text` says; NaN, which no range admits, when it says none."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def parse_margin(text: str) -> tuple[timedelta, float]:
    """`--margin`: a duration (30m) or a share of each workload's runtime (25%), as (fixed part,
    share)."""
    if text.endswith("%"):
        share = _number(text[:-1]) / 100
        if not 0 <= share <= 10:
            raise ValueError(f"--margin: {text!r} is not a share of 0 to 1000 %")
        return timedelta(0), share
    try:
        return parse_duration(text), 0.0
    except DurationError as exc:
        raise ValueError(
            f"--margin: {exc} (or a share such as 25%, or {' or '.join(MEASURED)})"
        ) from None


def measured(outcome: Outcome, how: str) -> tuple[timedelta, float] | None:
    """The margin `how` (one of MEASURED) a replay's outcome calls for, as (fixed part, share)."""
    if how == "measured":
        fixed = measured_margin(outcome)
        return None if fixed is None else (fixed, 0.0)
    share = measured_share(outcome)
    return None if share is None else (timedelta(0), share)


def worded(fixed: timedelta, share: float) -> str:
    parts = [format_duration(fixed)] if fixed or not share else []
    parts += [f"{share * 100:g} % of each runtime"] if share else []
    return " + ".join(parts)


def per_namespace(config: Config, policy: str, share: bool) -> Config:
    """The configuration with `policy` made one policy per namespace it selects, each named for
    its namespace and otherwise the same, sharing their pools (placement.sharePools) or not: what
    pools shared across policies change, on the same jobs."""
    p = config.policies[policy]
    split = {name: q for name, q in config.policies.items() if name != policy}
    for ns in p.spec.selector.namespaces:
        selector = p.spec.selector.model_copy(update={"namespaces": [ns]})
        placement = p.spec.placement.model_copy(update={"share_pools": share})
        spec = p.spec.model_copy(update={"selector": selector, "placement": placement})
        split[ns] = p.model_copy(
            update={"metadata": p.metadata.model_copy(update={"name": ns}), "spec": spec}
        )
    return replace_dataclass(config, policies=split)
