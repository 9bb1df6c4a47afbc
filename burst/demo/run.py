"""`burst demo`: the whole flow on the embedded default, in about a minute.

A sandbox on-prem cluster (8 V100, 4 T4), a sandbox cluster per simulated cloud (AWS, GCP, Azure
prices from the shipped catalog, provisioning 60x faster than life), a SQLite database, and the
reconcile pass run once a second. It submits a mix of jobs: burstable with tight and loose
deadlines, one that is not burstable, a PyTorchJob too big for on-prem, a hostile spec and one
over its budget; then it tears every pool down, meters them, and summarises what burst where and why.

Given a FakeClock (the tests), the same passes run on it instead: each pass moves it on by the
second the demo would have slept, so that a run takes as long as its passes take and no more;
job durations, launches and idle TTLs are counted on it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from burst import config, failpoints
from burst.amounts import Money
from burst.app import reconciler_for
from burst.clock import Clock, FakeClock, SystemClock
from burst.cloud import catalog
from burst.demo.scenario import V100, submit, submit_quick
from burst.kube.events import EventRecorder
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects
from burst.money import ledger, render, report
from burst.sandbox import Sandbox, gpu_node
from burst.sandbox.resources import BY_KIND
from burst.service.leader import take_epoch
from burst.service.loop import PassReport, Reconciler
from burst.store import database
from burst.store.tables import Dispatch, LedgerEntry, Pool, Workload
from providers.sim import SimCloud, SimProvider, SimSettings

PASS_INTERVAL = 1.0  # seconds between passes
# On a FakeClock: the sandboxes' controllers look at the clock this often (real seconds), and a
# pass waits at most this long for them after the clock moved.
CLUSTER_TICK = 0.01
SETTLE_SECONDS = 0.05


@dataclass
class Demo:
    reconciler: Reconciler
    providers: dict[str, SimProvider]
    local: KubeObjects
    sessions: Any
    jobs: list[tuple[str, str, str]]
    config: config.Config
    skips: dict[str, str] = field(default_factory=dict)  # uid -> the latest reason it was not burst
    crashes: int = 0
    refused_commits: int = 0  # commits of a replaced leader, refused by the fencing epoch
    successor: Reconciler | None = None


def run(
    *,
    seconds: float = 60.0,
    seed: int = 1,
    workdir: Path = Path(".burst-demo"),
    on_pass: Callable[[Demo, int], None] | None = None,
    quick: bool = False,
    crash_at: str | None = None,
    failover_at: str | None = None,
    clock: FakeClock | None = None,
) -> dict[str, Any]:
    """Run the demo; returns the summary (see `summarise`).

    `clock`: run on this FakeClock rather than the wall clock (see the module's docstring);
    `seconds` is then counted on it.

    `crash_at` arms a failpoint: the pass that reaches it dies as a killed process would, and a
    new Reconciler (nothing kept in memory) carries on from the database and the clusters.
    `failover_at` arms one where a new leader takes the next epoch and carries on from there,
    while the old one, not knowing yet, finishes its pass: its commits must be refused.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    now: Clock = clock or SystemClock()
    shipped = catalog.shipped()
    text = resources.files("burst").joinpath("data", "demo", "config.yaml").read_text("utf-8")
    (workdir / "config.yaml").write_text(text)
    cfg = config.load(
        [workdir / "config.yaml"], config.Vocabulary(shipped.regions(), shipped.accelerators())
    )
    assert cfg.service is not None
    db_file = workdir / "burst.db"
    db_file.unlink(missing_ok=True)
    engine = database.make_engine(f"sqlite:///{db_file}")
    database.upgrade(engine)
    sessions = database.sessions(engine)
    tick = 0.05 if clock is None else CLUSTER_TICK
    onprem = Sandbox(clock=now, tick=tick, default_duration=8).start()
    remotes = {
        t.name: Sandbox(clock=now, tick=tick, default_duration=8).start()
        for t in cfg.service.spec.targets
    }
    try:
        for i, product in enumerate((V100, V100, "Tesla-T4")):
            onprem.store.create(BY_KIND["Node"], "", gpu_node(f"onprem-{i}", product, gpus=4))
        from kubernetes import client

        from burst.kube.connect import TimedApiClient

        api = TimedApiClient(client.Configuration(host=onprem.url))
        remote_apis = {
            n: TimedApiClient(client.Configuration(host=s.url)) for n, s in remotes.items()
        }
        local = KubeObjects(api)
        events = EventRecorder(api, now)
        world = SimCloud(now, seed=seed, settings=SimSettings(speed=60.0))
        providers = {
            t.name: SimProvider(
                world,
                target=t.name,
                cloud=t.cloud,
                region=t.region,
                offers=lambda: list(shipped),
                kube=remote_apis[t.name],
            )
            for t in cfg.service.spec.targets
        }
        observer = Observer(api, now, events, watch_timeout=30).start()
        observer.wait_synced()

        def fresh(identity: str = "demo") -> Reconciler:
            epoch = take_epoch(sessions, identity, now)
            return reconciler_for(
                cfg,
                shipped,
                now,
                database.fenced_sessions(engine, epoch),
                observer,
                api,
                remote_apis,
                providers,
                epoch=epoch,
                launch_factor=5,
            )

        reconciler = fresh()
        demo = Demo(
            reconciler, providers, local, sessions, (submit_quick if quick else submit)(local), cfg
        )
        if crash_at:
            failpoints.arm(crash_at)
        if failover_at:

            def take_over() -> None:
                demo.successor = fresh("demo-successor")

            failpoints.arm(failover_at, then=take_over)
        started, passes = _Elapsed(clock), 0
        while started.seconds() < seconds:
            outcome: PassReport | None
            try:
                outcome = reconciler.run_once()
            except failpoints.Crash:
                demo.crashes += 1
                reconciler = demo.reconciler = (
                    fresh()
                )  # a restarted process: only the database remains
                continue
            except database.Fenced:
                demo.refused_commits += 1
                outcome = None
            if demo.successor is not None:  # the old leader is gone; the new one goes on
                reconciler = demo.reconciler = demo.successor
                demo.successor = None
            if outcome is None:
                continue
            for skip in outcome.plan.skips:
                # Keep the first refusal of a wanted burst (the interesting "why"); else the latest.
                if ", but " not in demo.skips.get(skip.workload, ""):
                    demo.skips[skip.workload] = skip.reason
            passes += 1
            if on_pass:
                on_pass(demo, passes)
            if passes > 5 and _settled(demo):
                break
            if clock is None:
                time.sleep(PASS_INTERVAL)
            else:
                clock.advance(PASS_INTERVAL)
                _let_clusters_see(observer)
        failpoints.disarm()
        with sessions() as s:  # tear everything down and meter it
            for pool in s.scalars(
                select(Pool).where(Pool.state.not_in(("deleted", "failed")))
            ).all():
                reconciler.teardown.delete_pool(s, pool.name, "demo over")
        observer.stop()
        summary = summarise(demo, started.seconds())
        with sessions() as s:
            built = report.build(
                s,
                now.now().strftime("%Y-%m"),
                "team",
                "USD",
                cfg.service.spec.usd_rates(now.now()),
                ledger.budget_limits(cfg),
                now=now.now(),
            )
        (workdir / "report.html").write_text(render.render(built, "html"), encoding="utf-8")
        summary["report"] = str(workdir / "report.html")
        return summary
    finally:
        # Together: each waits up to half a second for its server to notice.
        with ThreadPoolExecutor() as stopping:
            list(stopping.map(Sandbox.stop, [onprem, *remotes.values()]))
        engine.dispose()


class _Elapsed:
    """Seconds since the run began: on the wall clock (monotonic), or on the FakeClock."""

    def __init__(self, clock: FakeClock | None) -> None:
        self.clock = clock
        self.start = clock.now() if clock else None
        self.wall = time.monotonic()

    def seconds(self) -> float:
        if self.clock is None or self.start is None:
            return time.monotonic() - self.wall
        return (self.clock.now() - self.start).total_seconds()


def _let_clusters_see(observer: Observer) -> None:
    """After the FakeClock moved: give the sandboxes' kubelets a few rounds to finish the pods
    whose time came, and return early once the on-prem watch has seen something change."""
    observer.changed.clear()
    observer.changed.wait(SETTLE_SECONDS)


def _settled(demo: Demo) -> bool:
    """Every job is done (here or there) or refused, and no pool is still up."""
    with demo.sessions() as s:
        busy = s.scalar(
            select(func.count())
            .select_from(Dispatch)
            .where(Dispatch.state.in_(("planned", "dispatched")))
        )
        live = s.scalar(
            select(func.count())
            .select_from(Pool)
            .where(Pool.state.in_(("requested", "creating", "ready")))
        )
    if busy or live:
        return False
    for ns, kind, name in demo.jobs:
        obj = demo.local.read(kind, ns, name)
        if obj is None:
            continue
        conditions = {
            c.get("type"): c.get("status")
            for c in (obj.get("status") or {}).get("conditions") or []
        }
        done = any(conditions.get(t) == "True" for t in ("Complete", "Failed", "Succeeded"))
        if not (obj["metadata"].get("labels") or {}).get("burst.dev/burstable"):
            continue  # it waits for on-prem GPUs like any job; burst has nothing to do with it
        if not done and _state(demo, obj) != "cancelled":
            return False
    return True


def _state(demo: Demo, obj: dict[str, Any]) -> str | None:
    with demo.sessions() as s:
        row = s.scalar(select(Workload).where(Workload.uid == obj["metadata"]["uid"]))
        return row.state if row else None


def summarise(demo: Demo, elapsed: float) -> dict[str, Any]:
    jobs = []
    twice = 0
    with demo.sessions() as s:
        rows = {w.uid: w for w in s.scalars(select(Workload))}
        remote_runs = Counter(
            s.scalars(select(Dispatch.workload_id).where(Dispatch.state == "done"))
        )
        for ns, kind, name in demo.jobs:
            obj = demo.local.read(kind, ns, name) or {"metadata": {"uid": ""}}
            uid = obj["metadata"]["uid"]
            row = rows.get(uid)
            local_runs = (
                any(
                    (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
                    for p in demo.local.pods_of(obj)
                )
                if uid
                else False
            )
            remote = (
                s.scalar(
                    select(Dispatch).where(Dispatch.workload_id == row.id, Dispatch.state == "done")
                )
                if row
                else None
            )
            twice += bool(local_runs and remote is not None) or bool(
                row and remote_runs[row.id] > 1
            )
            annotations = obj["metadata"].get("annotations") or {}
            events = [
                e
                for e in demo.local.core.list_namespaced_event(ns).items
                if e.involved_object.uid == uid
                and e.reason in ("BurstRefused", "BurstFinished", "Burst")
            ]
            jobs.append(
                {
                    "job": f"{ns}/{name}",
                    "kind": kind,
                    "ran": (annotations.get("burst.dev/placement") or "on-prem")
                    if (remote or local_runs)
                    else "not yet",
                    # A job that ran here shows that, whatever burst once planned for it.
                    "state": "ran on-prem"
                    if local_runs and remote is None
                    else (row.state if row else "waiting on-prem"),
                    "why": (row.state_reason if row else None)
                    or demo.skips.get(uid)
                    or "; ".join(e.message for e in events),
                    "cost": annotations.get("burst.dev/cost"),
                }
            )
        pools = list(s.scalars(select(Pool)))
        spend = s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0))) or 0
        by_team: dict[str, int] = {}
        by_provider: dict[str, int] = {}
        by_kind: dict[str, int] = {}
        pool_teams: set[str] = set()  # who is charged what no job used (the policy's team)
        for e in s.scalars(select(LedgerEntry)):
            by_team[e.team] = by_team.get(e.team, 0) + e.amount_micros
            by_kind[e.kind] = by_kind.get(e.kind, 0) + e.amount_micros
            if e.workload_uid is None:
                pool_teams.add(e.team)
            by_provider[e.provider or "?"] = by_provider.get(e.provider or "?", 0) + e.amount_micros
    left = sum(
        len(p.list_pools(demo.reconciler.provisioner.installation)) for p in demo.providers.values()
    )
    worlds = {id(p.world): p.world for p in demo.providers.values()}  # the targets share one
    return {
        "seconds": round(elapsed, 1),
        "crashes": demo.crashes,
        "refused_commits": demo.refused_commits,
        "jobs": jobs,
        "pools_created": len(pools),
        "pools_created_in_clouds": sum(w.pools_created() for w in worlds.values()),
        "pools": [
            {
                "name": p.name,
                "target": p.target,
                "instance_type": p.instance_type,
                "state": p.state,
                "reason": p.state_reason,
            }
            for p in pools
        ],
        "pools_left_running": left,
        "jobs_run_twice": twice,
        "spend_usd": str(Money(int(spend), "USD").to_decimal()),
        "spend_by_team": {k: str(Money(v, "USD").to_decimal()) for k, v in sorted(by_team.items())},
        "spend_by_provider": {
            k: str(Money(v, "USD").to_decimal()) for k, v in sorted(by_provider.items())
        },
        "spend_by_kind": {k: str(Money(v, "USD").to_decimal()) for k, v in sorted(by_kind.items())},
        "pool_teams": sorted(pool_teams),
    }


def to_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2)


def board(demo: Demo) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """What the live view shows after a pass: (job, state, where) and (pool, state, nodes)."""
    with demo.sessions() as s:
        rows = {w.uid: w for w in s.scalars(select(Workload))}
        where = {
            d.workload_id: f"{d.target}/{pool.name}"
            for d, pool in s.execute(
                select(Dispatch, Pool)
                .join(Pool, Pool.id == Dispatch.pool_id)
                .where(Dispatch.state != "cancelled")
            )
        }
        pools = [
            (p.name, p.state, str(p.nodes_desired))
            for p in s.scalars(select(Pool).order_by(Pool.id))
        ]
    jobs = []
    for ns, kind, name in demo.jobs:
        obj = demo.local.read(kind, ns, name)
        row = rows.get(obj["metadata"]["uid"]) if obj else None
        placed = where.get(row.id, "") if row else ""
        status = (obj or {}).get("status") or {}
        if placed:
            state = row.state if row else ""
        elif status.get("active"):
            state = "running on-prem"
        elif status.get("succeeded") or status.get("failed"):
            state = "ran on-prem"
        else:
            state = row.state if row and row.state != "cancelled" else "waiting on-prem"
        jobs.append((f"{ns}/{name}", state, placed))
    return jobs, pools
