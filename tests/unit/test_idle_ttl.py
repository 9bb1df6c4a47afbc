"""An idle pool's time to live chosen against the next arrival (teardown.idleTtlChoice), against the
fixed TTL: what the plan deletes, and why (decide/existing.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from burst import decide
from burst.amounts import Money
from burst.cloud import catalog
from burst.config import Config
from burst.model import DeletePool, Dispatch, OfferKey, OnPrem, PoolView, RunningWorkload, Snapshot
from tests.builders import NOW, make_config, policy_spec, workload

H = timedelta(hours=1)
CATALOG = catalog.shipped()
BUSY_V100 = OnPrem({"V100": 8}, (RunningWorkload("r", "V100", 8, NOW + 3 * H),))
# Idle for 2 minutes, on aws-euc1, whose launch takes 10 minutes (tests/builders.py).
IDLE = PoolView(
    "aws-euc1-p3-8xlarge-od-1",
    "aws-euc1",
    "ml",
    OfferKey("aws", "eu-central-1", "p3.8xlarge", "on-demand", "V100", 4),
    1,
    "ready",
    NOW - H,
    idle_since=NOW - timedelta(minutes=2),
)


def _config(choice: str = "next-arrival", **trigger: str) -> Config:
    return make_config(
        (
            "ml",
            policy_spec(
                trigger={"deadlineSafetyMargin": "30m", **trigger},
                placement={"targets": ["aws-euc1"]},
                teardown={"idleTtl": "30m", "idleTtlChoice": choice},
            ),
        )
    )


def _deleted(snapshot: Snapshot, config: Config) -> dict[str, str]:
    plan = decide.plan(snapshot, CATALOG, config, NOW)
    return {a.pool: a.reason for a in plan.actions if isinstance(a, DeletePool)}


def test_with_no_work_in_sight_an_idle_pool_goes_at_once_and_with_a_fixed_ttl_it_stays() -> None:
    snapshot = Snapshot(pools=(IDLE,))
    assert _deleted(snapshot, _config()) == {
        IDLE.name: "idle 2m, and its next work is expected in 1h, later than a new pool "
        "launches (10m)"
    }
    assert _deleted(snapshot, _config("fixed")) == {}


def test_a_policy_that_sends_often_keeps_its_idle_pool_up_to_the_ttl() -> None:
    # Seven sends in the last hour: one every 8.6 minutes, sooner than a launch.
    often = Snapshot(pools=(IDLE,), sent_last_hour={"ml": 7})
    assert _deleted(often, _config()) == {}
    # Five: one every 12 minutes, later than a launch.
    assert IDLE.name in _deleted(Snapshot(pools=(IDLE,), sent_last_hour={"ml": 5}), _config())
    # Another policy's sends are not this pool's work.
    assert IDLE.name in _deleted(Snapshot(pools=(IDLE,), sent_last_hour={"other": 70}), _config())
    # Past the TTL it goes whatever comes.
    past = Snapshot(
        pools=(replace(IDLE, idle_since=NOW - timedelta(minutes=31)),),
        sent_last_hour={"ml": 70},
    )
    assert _deleted(past, _config()) == {IDLE.name: "idle 31m >= idle TTL 30m"}


def test_a_waiting_workload_its_wait_trigger_sends_within_a_launch_keeps_the_pool() -> None:
    """A workload waits on-prem under a 2-hour wait trigger: it is due in 5 minutes, and will
    want the pool then; due in 20 minutes, a new pool launched then costs less than the idle."""
    config = _config(maxPendingWait="2h")
    soon = workload(pending_since=NOW - 2 * H + timedelta(minutes=5), deadline=NOW + 30 * H)
    later = workload(pending_since=NOW - 2 * H + timedelta(minutes=20), deadline=NOW + 30 * H)
    assert _deleted(Snapshot(workloads=(soon,), onprem=BUSY_V100, pools=(IDLE,)), config) == {}
    reason = _deleted(Snapshot(workloads=(later,), onprem=BUSY_V100, pools=(IDLE,)), config)
    assert reason == {
        IDLE.name: "idle 2m, and its next work is expected in 20m, later than a new pool "
        "launches (10m)"
    }
    # Work the pool's nodes cannot run keeps nothing: 8 GPUs a pod on a node of 4, or a T4.
    for unfit in (
        workload(gpus_per_pod=8, pending_since=soon.pending_since, deadline=soon.deadline),
        workload(accelerator="T4", pending_since=soon.pending_since, deadline=soon.deadline),
    ):
        snapshot = Snapshot(workloads=(unfit,), onprem=BUSY_V100, pools=(IDLE,))
        assert IDLE.name in _deleted(snapshot, config)


def test_a_wait_per_gpu_hour_that_ends_within_a_launch_keeps_the_pool() -> None:
    # 10 minutes per GPU-hour of a 2-hour run of 2 GPUs: its wait ends after 40 minutes.
    config = _config(waitPerGpuHour="10m")
    pods = workload(gpus_per_pod=1, pods=2, deadline=NOW + 30 * H)  # waited 10m: 30m to go
    assert IDLE.name in _deleted(
        Snapshot(workloads=(pods,), onprem=BUSY_V100, pools=(IDLE,)), config
    )
    waited = replace(pods, pending_since=NOW - timedelta(minutes=35))  # 5m to go
    assert _deleted(Snapshot(workloads=(waited,), onprem=BUSY_V100, pools=(IDLE,)), config) == {}
    # One past its wait and still waiting was refused by the plan: it keeps nothing.
    refused = replace(pods, pending_since=NOW - H, max_cost=Money.of("0.01", "USD"))
    snapshot = Snapshot(workloads=(refused,), onprem=BUSY_V100, pools=(IDLE,))
    assert IDLE.name in _deleted(snapshot, config)


def test_an_idle_pool_the_plan_gives_work_is_kept() -> None:
    # At risk on-prem now (busy for 3 hours), the workload goes to the idle pool, which stays.
    urgent = workload(deadline=NOW + 3 * H)
    plan = decide.plan(
        Snapshot(workloads=(urgent,), onprem=BUSY_V100, pools=(IDLE,)), CATALOG, _config(), NOW
    )
    assert [a.pool for a in plan.actions if isinstance(a, Dispatch)] == [IDLE.name]
    assert not [a for a in plan.actions if isinstance(a, DeletePool)]
