"""Step 1 of the decision: triggers. Whether a burstable workload wants to burst, and why, from its
on-prem estimate: a deadline at risk (the estimated finish later than the deadline minus the
policy's safety margin), a wait past the policy's maximum or past its wait per GPU-hour of the
run, an exhausted namespace quota where the policy bursts for quota, or no on-prem GPU group that
can ever run it. Also the order the wanting workloads are placed in (least slack first) and
whether spot capacity suits them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from burst.amounts import Money
from burst.config import BurstPolicy, TargetSpec, Trigger
from burst.decide.candidates import expected_run
from burst.decide.onprem import Estimate, Sweep
from burst.decide.wording import Words, at
from burst.durations import format_duration
from burst.model import Workload


@dataclass
class Want:
    """A workload that wants to burst: why, with what runtime, and by when it must finish."""

    w: Workload
    policy: BurstPolicy
    runtime: timedelta
    onprem: Estimate
    trigger: str | Words
    finish_by: datetime | None  # the deadline, or when it is lost anyway, the soonest cloud finish
    worth: Money | None = None  # the most its cloud run may cost: the time it saves, priced


def sends_anyway(w: Workload, t: Trigger, now: datetime) -> bool:
    """Whether the wait or the quota trigger sends `w` whatever its on-prem estimate: trigger()
    then gives a reason, whatever the estimate (the planner asks it only for those it places)."""
    return _past_max_wait(w, t, now) or _quota_sends(w, t)


def latest_start(w: Workload, t: Trigger, runtime: timedelta) -> datetime | None:
    """The latest on-prem start of a run of `runtime` at which trigger() does not find the
    deadline at risk (None: `w` has no deadline): its deadline, less the margin and the share of
    the run the trigger counts."""
    if w.deadline is None:
        return None
    share = t.deadline_runtime_share
    counted = runtime * share if share < 1 else runtime
    return w.deadline - safety_margin(t, runtime) - counted


def _past_max_wait(w: Workload, t: Trigger, now: datetime) -> bool:
    return t.max_pending_wait is not None and now - w.pending_since >= t.max_pending_wait


def _quota_sends(w: Workload, t: Trigger) -> bool:
    return w.quota_blocked and t.quota_exhausted


def trigger(
    w: Workload,
    policy: BurstPolicy,
    est: Estimate,
    sweep: Sweep,
    now: datetime,
    explain: bool,
) -> tuple[str | Words | None, str]:
    """(why it should burst, or None; why not, worded only when `explain`)."""
    t = policy.spec.trigger
    if est.start is None:
        have = sweep.capacity(est.product)
        product = est.product or "any GPU"
        widest = sweep.widest_node(est.product)
        if widest is not None and w.gpus <= have:
            return (
                f"on-prem cannot run it: {w.pods} pod(s) of {w.gpus_per_pod} {product} do not "
                f"fit its nodes (at most {widest} on one)",
                "",
            )
        return (f"on-prem cannot run it: needs {w.gpus} {product}, on-prem has {have}", "")
    margin, finish = t.deadline_safety_margin, est.finish
    if w.deadline is not None and est.finish is not None:
        margin = safety_margin(t, est.finish - est.start)
        if t.deadline_runtime_share < 1:  # the run counted shorter: at risk only if it still misses
            finish = est.start + (est.finish - est.start) * t.deadline_runtime_share
        if finish is not None and finish > w.deadline - margin:
            return Words(_at_risk, finish, w.deadline, margin, now, t.deadline_runtime_share), ""
    waited = now - w.pending_since
    if _past_max_wait(w, t, now):
        assert t.max_pending_wait is not None
        return Words(_waited, waited, t.max_pending_wait), ""
    if t.wait_per_gpu_hour is not None and est.finish is not None and est.start > now:
        allowed = t.wait_per_gpu_hour * (w.gpus * (est.finish - est.start) / timedelta(hours=1))
        if waited >= allowed:
            return Words(_waited, waited, allowed, t.wait_per_gpu_hour), ""
    if _quota_sends(w, t):
        return (f"GPU quota of namespace {w.namespace} exhausted", "")
    if not explain:
        return None, ""
    if w.deadline is not None:
        why = (
            f"deadline met on-prem: est. finish{_counted(t.deadline_runtime_share)} "
            f"{at(finish, now)} <= {at(w.deadline, now)} - {format_duration(margin)} margin"
        )
    else:
        why = f"no deadline; est. on-prem start {at(est.start, now)}"
        if t.max_pending_wait is not None:
            why += (
                f", pending {format_duration(waited)} < max wait "
                f"{format_duration(t.max_pending_wait)}"
            )
    if w.quota_blocked:
        why += f"; quota-blocked, but policy {policy.metadata.name} does not burst for quota"
    return None, why


def _at_risk(
    finish: datetime, deadline: datetime, margin: timedelta, now: datetime, share: float
) -> str:
    return (
        f"deadline at risk: est. on-prem finish{_counted(share)} {at(finish, now)} > "
        f"{at(deadline, now)} - {format_duration(margin)} margin"
    )


def _counted(share: float) -> str:
    return "" if share == 1 else f" of a run {share:.0%} as long as expected"


def _waited(waited: timedelta, most: timedelta, per_gpu_hour: timedelta | None = None) -> str:
    if per_gpu_hour is None:
        return f"pending {format_duration(waited)} >= max wait {format_duration(most)}"
    return (
        f"pending {format_duration(waited)} >= its wait of {format_duration(per_gpu_hour)} "
        f"per GPU-hour, {format_duration(most)}"
    )


def time_saved(
    w: Workload,
    policy: BurstPolicy,
    est: Estimate,
    cloud_finish: datetime | None,
) -> tuple[str, Money] | None:
    """With a price on waiting (`trigger.waitPrice`): why the workload should burst and the most
    its cloud run may cost, when a cloud would finish it sooner than on-prem (`cloud_finish`:
    the soonest of a new pool on the fastest target and room on an open pool); None
    otherwise. The hours saved are priced per GPU, so a big job waiting long is worth the most,
    as Starburst's waiting budget grows with a job's size."""
    price = policy.spec.trigger.wait_price
    if price is None or est.finish is None or cloud_finish is None:
        return None
    saved = est.finish - cloud_finish
    if saved <= timedelta(0):
        return None
    per_gpu_hour = Money.of(price, policy.spec.limits.currency)
    worth = Money(
        per_gpu_hour.micros * w.gpus * int(saved.total_seconds()) // 3600, per_gpu_hour.currency
    )
    if worth.micros <= 0:
        return None
    why = (
        f"a cloud finishes it {format_duration(saved)} sooner, worth {worth} "
        f"at {per_gpu_hour} per GPU-hour"
    )
    return why, worth


def wait_ends(w: Workload, t: Trigger, runtime: timedelta) -> datetime | None:
    """When the wait triggers send `w` if it still waits, whatever its on-prem estimate: past the
    maximum wait, or past its wait per GPU-hour of `runtime`. None: the policy limits no wait. (The
    deadline trigger is not bound to a time so: it fires at once or as the estimate moves.)"""
    times = []
    if t.max_pending_wait is not None:
        times.append(w.pending_since + t.max_pending_wait)
    if t.wait_per_gpu_hour is not None:
        times.append(
            w.pending_since + t.wait_per_gpu_hour * (w.gpus * runtime / timedelta(hours=1))
        )
    return min(times, default=None)


def urgency(w: Workload, runtime: timedelta, now: datetime) -> tuple[datetime, datetime, str]:
    """Placement order: the latest start that still meets the deadline, earliest first."""
    if w.deadline is None:
        return (datetime.max.replace(tzinfo=now.tzinfo), w.pending_since, w.uid)
    return (w.deadline - runtime, w.created, w.uid)


def spot_allowed(
    w: Workload,
    policy: BurstPolicy,
    runtime: timedelta,
    targets: Sequence[TargetSpec],
    slowest: timedelta,
    now: datetime,
) -> bool:
    """Whether a run of `w` for `runtime` may be on spot on the policy's `targets`, whose slowest
    launch is `slowest`. Its estimate has no part in it: the placement may ask it unpriced."""
    placement = policy.spec.placement
    if placement.capacity == "on-demand":
        return False
    if (w.lost_copy or w.fails_on_reclaim) and placement.capacity != "spot":
        # Its run was cut short once; on spot it may be again, and start again from scratch (a
        # replay sent a run of 200 hours back to spot nineteen times). Or a reclaim would fail
        # the job, which on-prem would have run.
        return False
    if (
        placement.max_spot_delay is not None
        and spot_delay(w, runtime, targets) > placement.max_spot_delay
    ):
        return False
    if placement.capacity == "spot" or w.deadline is None:
        return True
    # spot-if-slack: an interruption costs a restart from scratch; the slack must absorb it.
    one_run = slowest + runtime
    return now + 2 * one_run <= w.deadline - safety_margin(policy.spec.trigger, runtime)


def spot_delay(w: Workload, runtime: timedelta, targets: Sequence[TargetSpec]) -> timedelta:
    """How much later than on demand a run of `w` is expected to end on spot, on the target of
    the most: its restarts from scratch and their launches, on a node per pod (expected_run); 0
    where no target knows its interruption rate. On realistic clouds, spot runs of many hours were
    what kept burst's mean completion time above compute-wait's on Philly."""
    worst = timedelta(0)
    for t in targets:
        run, restarts = expected_run(t, "spot", w.pods, runtime)
        worst = max(worst, run - runtime + restarts * t.provisioning)
    return worst


def safety_margin(t: Trigger, runtime: timedelta) -> timedelta:
    """How long before its deadline a run of `runtime` is to finish: the policy's fixed margin
    and its share of the run (whole seconds, as the margin is worded)."""
    if not t.deadline_safety_share:
        return t.deadline_safety_margin  # asked for every waiting workload on every plan
    return t.deadline_safety_margin + timedelta(
        seconds=round(runtime.total_seconds() * t.deadline_safety_share)
    )
