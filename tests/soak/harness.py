"""The soak: the real `burst serve` replicas on PostgreSQL, fed a window of a shipped trace, under
faults at a steady rate from a seed, with the invariant checker looking on; then drained and
checked once more. `run()` returns the report that tests/soak/test_soak.py asserts on and
benchmarks/soak.py prints (docs/reliability.md has a long run's).

Time: the service runs on the wall clock with short settings (a pass a second, idle TTL 4 s,
launches in seconds); the trace is compressed `compress` times (720: a trace hour in 5 s), so
that a trace's two weeks pass in 28 minutes.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from burst.clock import SystemClock
from burst.kube.replicate import KubeObjects
from burst.store import database as burst_database
from providers.sim import SimCloud
from tests.soak import faults, feed, world
from tests.soak.invariants import Checker
from tests.soak.world import INSTALLATION, LEASE_S, REMOTE_GRACE

PASS = timedelta(seconds=1)
ORPHAN_GRACE = timedelta(seconds=10)
ORPHAN_GC = timedelta(seconds=5)  # intervals.orphanGc
REPLICA_FAULTS = ("kill_leader", "kill_follower", "pause_leader_past_lease")
BUDGET_MICROS = 500_000  # theory's hard daily budget: 0.50 USD

# Two policies alike but for their namespaces, sharing their pools (placement.sharePools): theory's
# jobs, under their own hard budget, take the room of training's pools and theirs theory's, each
# run spent from its own policy's budgets.
POLICY = """\
apiVersion: burst.dev/v1
kind: BurstPolicy
metadata: {{name: {name}}}
spec:
  selector: {{namespaces: [{namespaces}]}}
  trigger: {{deadlineSafetyMargin: 2s, maxPendingWait: 30s}}
  placement:
    targets: [sim-aws, sim-gcp]
    accelerators: {{V100: [V100, A10G, L4, A100]}}
    capacity: spot-if-slack
    sharePools: true
  limits: {{currency: USD, maxNodesPerPool: 4, maxPools: 3}}
  teardown: {{idleTtl: 4s, maxLifetime: 10m}}
  replication: {{imageRegistries: [registry.cern.ch], secrets: [wandb-api-key]}}
  defaults: {{expectedRuntime: 20s}}
"""
POLICIES = {"training": "cms-ml, atlas-ml", "theory": "theory"}

SERVICE = """\
apiVersion: burst.dev/v1
kind: ServiceConfig
metadata: {{name: soak}}
spec:
  installationId: {installation}
  database: {{url: "{db}"}}
  onPrem: {{kubeconfig: {onprem}}}
  targets:
    - name: sim-aws
      provider: sim
      region: eu-central-1
      sim: {{cloud: aws, stateFile: {state}, kubeconfig: {cloud_side}}}
      kubernetes: {{kubeconfig: {remote}}}
      provisioningEstimate: 5s
      remoteNamespace: "aws-{{namespace}}"
    - name: sim-gcp
      provider: sim
      region: europe-west4
      sim: {{cloud: gcp, stateFile: {state}, kubeconfig: {cloud_side}}}
      kubernetes: {{kubeconfig: {remote}}}
      provisioningEstimate: 5s
      remoteNamespace: "gcp-{{namespace}}"
  intervals: {{reconcile: 1s, sync: 1s, teardown: 1s, meter: 5s, orphanGc: 5s}}
  graces: {{remoteCluster: {remote_grace}s, orphanPool: {orphan_grace}s, budgetHorizon: 60s}}
  api: {{tokenFile: {token}}}
  leaderElection: {{namespace: default, leaseName: burst-leader, leaseDuration: {lease}s}}
---
{policies}---
apiVersion: burst.dev/v1
kind: Budget
metadata: {{name: theory-daily}}
spec:
  scope: {{namespace: theory}}
  period: day
  amount: "{budget}"
  currency: USD
  enforcement: hard
"""


BACKLOG_S = 30.0
QUIET_S = 10.0  # seconds of nothing to do before a run counts as drained


@dataclass
class Settings:
    seconds: float = 180  # of trace fed; the drain comes after
    jobs: int = 300
    start_day: float = 10.0
    compress: float = 720.0
    seed: int = 1
    fault_every: float = 12.0  # seconds between faults
    drain: float = 150.0
    speed: float = 120.0  # launches: minutes of the latency model become half-seconds
    longest: int = 2 * 86400  # trace seconds a run is capped at (feed.jobs)
    kills: bool = True  # False: no replica killed or paused, no outage past the lease (memory)
    # Replicas under tracemalloc, writing their growing allocation sites (tests/soak/heap.py).
    heap: bool = False
    # Finished Jobs and PyTorchJobs deleted this many seconds after they end
    # (ttlSecondsAfterFinished), as a production cluster does; None: kept, as the invariants'
    # final look reads them.
    ttl_s: int | None = None
    # theory's hard daily budget; the daily period outlasts any run, so once spent it holds
    # theory's burstable jobs to the end (a memory run raises it to keep the backlog steady).
    budget_micros: int = BUDGET_MICROS


@dataclass
class Report:
    fed: int = 0
    hostile: int = 0
    malformed: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    violations: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    checks: int = 0
    restarts: int = 0
    # (s, replica, pid, RSS in MiB) of both replicas, every look
    memory_mib: list[tuple[float, str, int, float]] = field(default_factory=list)
    workloads: dict[str, int] = field(default_factory=dict)
    # (s, workloads by state) every BACKLOG_S: what the service holds as memory grows
    backlog: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    pools: int = 0
    shared: int = 0  # dispatches onto a pool of another policy (placement.sharePools)
    drained_s: float | None = None
    # namespace/name of each workload still planned or dispatched when the drain ended; what its
    # copy and pods showed then is in the workdir's undrained.json
    undrained: list[str] = field(default_factory=list)
    latency: dict[str, Any] = field(default_factory=dict)  # see decision_latency()
    seconds: float = 0.0


def api_get(port: int, path: str, token: str, timeout: float) -> urllib3.BaseHTTPResponse:
    """GET a replica's API or metrics, with the token the replicas are given."""
    return urllib3.request(
        "GET",
        f"http://127.0.0.1:{port}/{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
    )


class PassTimes:
    """How long the replicas' passes took lately, from their metrics (`burst_pass_seconds`):
    what the checker allows for a pass that must come is a few of those, not of the interval."""

    def __init__(self, ports: dict[str, int], token: str, window_s: float = 60.0) -> None:
        self.ports, self.token, self.window_s = ports, token, window_s
        self._totals: dict[int, tuple[float, float]] = {}  # port -> (sum, count) last read
        self._means: deque[tuple[float, float]] = deque()  # (when, mean pass since the read before)

    def mean(self) -> timedelta:
        """The longest mean pass of any replica over the window (0 before any)."""
        now = time.monotonic()
        for port in self.ports.values():
            answer = api_get(port, "metrics", self.token, timeout=5)
            samples = {
                sample.name: sample.value
                for family in text_string_to_metric_families(answer.data.decode())
                if family.name == "burst_pass_seconds"
                for sample in family.samples
            }
            total = samples.get("burst_pass_seconds_sum", 0.0)
            count = samples.get("burst_pass_seconds_count", 0.0)
            before = self._totals.get(port)
            self._totals[port] = (total, count)
            if before is not None and count > before[1]:  # a restarted replica counts anew
                self._means.append((now, (total - before[0]) / (count - before[1])))
        while self._means and now - self._means[0][0] > self.window_s:
            self._means.popleft()
        return timedelta(seconds=max((m for _, m in self._means), default=0.0))


class Soak:
    def __init__(self, workdir: Path, server_url: str, settings: Settings) -> None:
        self.dir, self.settings = workdir, settings
        self.server_url = server_url
        self.rng = random.Random(settings.seed)
        self.report = Report()
        self.token = "soak-token-" + secrets.token_hex(12)
        self.secret = "soak-secret-" + secrets.token_hex(12)
        self.stop = threading.Event()
        self.replicas: dict[str, world.Process] = {}
        self.ports: dict[str, int] = {}
        self.passes = PassTimes(self.ports, self.token)
        self.timers: list[threading.Timer] = []  # the ends of faults under way
        self.helpers: list[threading.Thread] = []  # supervisor, fault injector, checker
        self.t0 = time.monotonic()

    # -- the world --

    @contextlib.contextmanager
    def up(self) -> Iterator[None]:
        onprem_proc, onprem_url = world.sandbox("onprem", self.dir, nodes=4)
        remote_proc, remote_url = world.sandbox("remote", self.dir, nodes=0)
        self.onprem_proc, self.remote_proc = onprem_proc, remote_proc
        self.remote_gate = world.Gate(int(remote_url.rsplit(":", 1)[1]))
        try:
            with world.database(self.server_url) as url:
                self.db_gate = world.Gate(url.port or 5432)
                served = url.set(host="127.0.0.1", port=self.db_gate.port)
                self.db_url = url.render_as_string(hide_password=False)
                engine = burst_database.make_engine(self.db_url)
                burst_database.upgrade(engine)
                self.engine = engine
                self.state = self.dir / "clouds.json"
                (self.dir / "token").write_text(self.token + "\n")
                config = self.dir / "config"
                config.mkdir()
                (config / "burst.yaml").write_text(
                    SERVICE.format(
                        installation=INSTALLATION,
                        db=served.render_as_string(hide_password=False),
                        onprem=world.kubeconfig(self.dir / "onprem.kc", onprem_url),
                        remote=world.kubeconfig(
                            self.dir / "remote.kc", f"http://127.0.0.1:{self.remote_gate.port}"
                        ),
                        # The clouds remove the Nodes of the instances they end from inside,
                        # past the gate that cuts burst off the cluster.
                        cloud_side=world.kubeconfig(self.dir / "cloud.kc", remote_url),
                        state=self.state,
                        token=self.dir / "token",
                        lease=LEASE_S,
                        remote_grace=int(REMOTE_GRACE.total_seconds()),
                        orphan_grace=int(ORPHAN_GRACE.total_seconds()),
                        budget=f"{self.settings.budget_micros / 1e6:.2f}",
                        policies="---\n".join(
                            POLICY.format(name=name, namespaces=namespaces)
                            for name, namespaces in POLICIES.items()
                        ),
                    )
                )
                self.config = config
                self.local = world.api(onprem_url)
                self.remote = world.api(remote_url)
                self.clouds = SimCloud(SystemClock(), seed=self.settings.seed, state=self.state)
                self.clouds.set_faults(speed=self.settings.speed)
                self.checker = Checker(
                    engine=engine,
                    local=self.local,
                    remote=self.remote,
                    state=self.state,
                    installation=INSTALLATION,
                    foreign=("sim-aws", f"{INSTALLATION}-pool-x"),
                    orphan_grace=ORPHAN_GRACE + ORPHAN_GC,
                    pass_interval=PASS,
                    budgets={"theory": self.settings.budget_micros},
                    max_pools=dict.fromkeys(POLICIES, 3),  # as the policies say
                    max_nodes=4,
                )
                for name in ("a", "b"):
                    self.ports[name] = world.free_port()
                    self.replicas[name] = world.Process(
                        f"serve-{name}",
                        [
                            sys.executable,
                            "-m",
                            *(
                                ["tests.soak.heap", str(self.dir)]
                                if self.settings.heap
                                else ["burst"]
                            ),
                            "serve",
                            "-c",
                            str(config),
                            "--identity",
                            name,
                            "--port",
                            str(self.ports[name]),
                        ],
                        self.dir / f"serve-{name}.log",
                    )
                    self.replicas[name].start()
                try:
                    yield
                finally:
                    self.stop.set()
                    # A look still under way holds a database connection: it ends before the
                    # engine goes (one left open surfaced as a ResourceWarning in a later test).
                    for helper in self.helpers:
                        helper.join(timeout=60)
                    for timer in self.timers:
                        timer.cancel()
                    for replica in self.replicas.values():
                        replica.stop()
                    engine.dispose()
                    self.local.close()
                    self.remote.close()
                    self.db_gate.close()
        finally:
            self.remote_gate.close()
            onprem_proc.stop()
            remote_proc.stop()

    def leader(self) -> str | None:
        try:
            lease = client.CoordinationV1Api(self.local).read_namespaced_lease(
                "burst-leader", "default", _request_timeout=5
            )
        except Exception:
            return None
        holder = lease.spec.holder_identity if lease.spec else None
        return holder if holder in self.replicas else None

    def _supervise(self) -> None:
        """Restart a replica that exited, a second later, as Kubernetes restarts a pod."""
        while not self.stop.wait(0.5):
            for replica in self.replicas.values():
                if replica.proc is not None and replica.proc.poll() is not None:
                    time.sleep(1.0)
                    if not self.stop.is_set():
                        replica.start()
                        self.report.restarts += 1

    # -- faults --

    def faults(self) -> dict[str, Callable[[], None]]:
        return faults.kinds(self)

    def _inject(self) -> None:
        kinds = self.faults()
        if not self.settings.kills:
            kinds = {k: v for k, v in kinds.items() if k not in REPLICA_FAULTS}
        order: list[str] = []
        while not self.stop.wait(self.settings.fault_every):
            if self._feeding_done:
                return
            if not order:
                order = list(kinds)
                self.rng.shuffle(order)
            kind = order.pop()
            kinds[kind]()
            self.report.faults[kind] += 1

    # -- the run --

    def run(self) -> Report:
        rows = feed.window(
            self.settings.start_day,
            self.settings.seconds * self.settings.compress / 86400,
            self.settings.jobs,
        )
        jobs = feed.jobs(
            rows,
            compress=self.settings.compress,
            allowance=10,
            seed=self.settings.seed,
            longest=self.settings.longest,
        )
        self._feeding_done = False
        with self.up():
            local = KubeObjects(self.local)
            feed.prepare(local, self.secret)
            faults.foreign_pool(self)
            self.helpers += [
                threading.Thread(target=self._supervise, daemon=True),
                threading.Thread(target=self._inject, daemon=True),
                threading.Thread(target=self._watch, daemon=True),
            ]
            for t in self.helpers:
                t.start()
            start = time.monotonic()
            for job in jobs:
                wait = start + job.at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self._create(local, job)
            self._feeding_done = True
            self._in_flight("in_flight.json")  # what the drain starts from
            drained = self._drain(jobs)
            self.report.drained_s = drained
            self.report.undrained = self._in_flight("undrained.json")
            self._finish(jobs)
        self.report.seconds = round(time.monotonic() - self.t0, 1)
        return self.report

    def _create(self, local: KubeObjects, job: feed.Job) -> None:
        if self.settings.ttl_s is not None:
            spec = job.body["spec"]
            # A Job's own field, a PyTorchJob's run policy's (the training operator's cleanupJob)
            on = spec if job.kind == "Job" else spec.setdefault("runPolicy", {})
            on["ttlSecondsAfterFinished"] = self.settings.ttl_s
        for _ in range(30):  # the API server may be paused: keep trying, as a user would
            try:
                feed.create(local, job)
                break
            except Exception:
                time.sleep(1)
        self.report.fed += 1
        self.report.hostile += job.hostile
        self.report.malformed += job.malformed

    def _watch(self) -> None:
        counted = 0.0
        while not self.stop.wait(2.0):
            if time.monotonic() - counted >= BACKLOG_S:
                with contextlib.suppress(Exception), self.engine.connect() as db:
                    states = db.execute(
                        text("SELECT state, COUNT(*) FROM workloads GROUP BY state")
                    ).all()
                    at = round(time.monotonic() - self.t0, 1)
                    self.report.backlog.append((at, {str(k): int(n) for k, n in states}))
                    counted = time.monotonic()
            with contextlib.suppress(Exception):
                self.checker.recent_pass = self.passes.mean()
            try:
                self.checker.tick()
            except Exception:
                continue
            at = round(time.monotonic() - self.t0, 1)
            for name, replica in self.replicas.items():
                rss, pid = replica.rss_mib(), replica.pid
                if rss is not None and pid is not None:
                    self.report.memory_mib.append((at, name, pid, round(rss, 1)))

    def _drain(self, jobs: list[feed.Job]) -> float | None:
        """Seconds until nothing is planned or dispatched and no pool of ours is up, for QUIET_S
        in a row (a pending job may still be sent: one quiet look declared the memory run
        drained, and the pools it launched then were left up), or None. A job sent during the
        drain has the drain's time from then to finish, to twice the drain in all: one held by
        its hard budget was sent when the runs before it freed their reservations, a minute
        before a drain counted from the feed's end ran out, and its pool was counted left up."""
        start, quiet = time.monotonic(), None
        until, sent = start + self.settings.drain, None
        while time.monotonic() < until:
            with self.engine.connect() as db:
                active = db.execute(
                    text("SELECT COUNT(*) FROM workloads WHERE state IN ('planned', 'dispatched')")
                ).scalar_one()
                attempts = db.execute(text("SELECT COUNT(*) FROM dispatches")).scalar_one()
            if sent is not None and attempts > sent:
                until = min(time.monotonic() + self.settings.drain, start + 2 * self.settings.drain)
            sent = attempts
            if active or faults.ours(self):
                quiet = None
            elif quiet is None:
                quiet = time.monotonic()
            elif time.monotonic() - quiet >= QUIET_S:
                return round(quiet - start, 1)
            time.sleep(1.0)
        return None

    def _in_flight(self, filename: str) -> list[str]:
        """Each workload planned or dispatched now, written to `filename` in the workdir with its
        rows, its copy's status and its pods' phases and conditions; their namespace/names. After
        the drain, what a run that ends undrained left (its database and clusters go with it)."""
        with self.engine.connect() as db:
            rows = db.execute(
                text(
                    "SELECT w.kind, w.namespace, w.name, w.state, d.attempt, d.state, "
                    "d.state_reason, d.target, d.remote_namespace, d.remote_name, p.name, p.state "
                    "FROM workloads w LEFT JOIN dispatches d ON d.workload_id = w.id "
                    "AND d.state NOT IN ('done', 'cancelled') LEFT JOIN pools p ON p.id = d.pool_id "
                    "WHERE w.state IN ('planned', 'dispatched')"
                )
            ).all()
        left = []
        remote = KubeObjects(self.remote)
        for (
            kind,
            ns,
            name,
            state,
            attempt,
            d_state,
            reason,
            target,
            r_ns,
            r_name,
            pool,
            p_state,
        ) in rows:
            copy, pods = None, []
            with contextlib.suppress(Exception):  # the remote cluster may be paused or gone
                if r_ns and r_name:
                    copy = (remote.read(kind, r_ns, r_name) or {}).get("status")
                    pods = [
                        {
                            "name": pod.metadata.name,
                            "phase": pod.status.phase,
                            "node": pod.spec.node_name,
                            "conditions": [
                                (c.type, c.status, c.reason) for c in pod.status.conditions or []
                            ],
                        }
                        for pod in remote.core.list_namespaced_pod(r_ns).items
                        if (pod.metadata.name or "").startswith(r_name)
                    ]
            left.append(
                {
                    "workload": f"{ns}/{name}",
                    "state": state,
                    "dispatch": {"attempt": attempt, "state": d_state, "reason": reason},
                    "copy": f"{target}/{r_ns}/{r_name}" if r_name else None,
                    "pool": {"name": pool, "state": p_state},
                    "copy_status": copy,
                    "pods": pods,
                }
            )
        (self.dir / filename).write_text(json.dumps(left, indent=2, default=str) + "\n")
        return [entry["workload"] for entry in left]

    def _finish(self, jobs: list[feed.Job]) -> None:
        texts = [r.log.read_text(errors="replace") for r in self.replicas.values()]
        skipped: set[str] = set()
        for port in self.ports.values():
            for path in (
                "api/v1/workloads",
                "api/v1/pools",
                "api/v1/budgets",
                "api/v1/ledger",
                "api/v1/plan",
                "metrics",
            ):
                with contextlib.suppress(Exception):
                    answer = api_get(port, path, self.token, timeout=10)
                    texts.append(answer.data.decode(errors="replace"))
                    if path == "api/v1/plan":
                        skips = answer.json().get("skips") or []
                        skipped |= {f"{k['namespace']}/{k['name']}" for k in skips}
        month = datetime.now(UTC).strftime("%Y-%m")
        report = subprocess.run(
            [
                sys.executable,
                "-m",
                "burst",
                "report",
                "--period",
                month,
                "--by",
                "job",
                "--url",
                self.db_url,
                "-c",
                str(self.config),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        texts += [report.stdout, report.stderr]
        self.checker.final(
            [self.token, self.secret],
            texts,
            [f"{j.namespace}/{j.name}" for j in jobs if j.hostile],
            [f"{j.namespace}/{j.name}" for j in jobs if j.malformed],
            sorted(skipped),
        )
        self.report.violations = dict(self.checker.violations)
        self.report.examples = {k: v for k, v in self.checker.examples.items() if v}
        self.report.checks = self.checker.checks
        self.report.latency = decision_latency(self.engine, self.local)
        with self.engine.connect() as db:
            self.report.workloads = dict(
                db.execute(text("SELECT state, COUNT(*) FROM workloads GROUP BY state")).all()
            )
            self.report.pools = db.execute(text("SELECT COUNT(*) FROM pools")).scalar_one()
            self.report.shared = db.execute(
                text(
                    "SELECT COUNT(*) FROM dispatches d JOIN workloads w ON w.id = d.workload_id "
                    "JOIN pools p ON p.id = d.pool_id WHERE w.policy <> p.policy"
                )
            ).scalar_one()


def decision_latency(engine: Any, local: Any) -> dict[str, Any]:
    """From each burst job's creation (its creationTimestamp, to the second) to its first
    dispatch being planned: quantiles in seconds over every job that burst."""
    created = {}
    for kind in ("jobs", "pytorchjobs"):
        if kind == "jobs":
            answer = client.BatchV1Api(local).list_job_for_all_namespaces(_preload_content=False)
        else:
            answer = client.CustomObjectsApi(local).list_cluster_custom_object(
                "kubeflow.org", "v1", kind, _preload_content=False
            )
        for item in json.loads(answer.data)["items"]:
            meta = item["metadata"]
            created[meta["uid"]] = datetime.fromisoformat(meta["creationTimestamp"])
    with engine.connect() as db:
        planned = db.execute(
            text(
                "SELECT w.uid, MIN(d.created_at) FROM workloads w "
                "JOIN dispatches d ON d.workload_id = w.id GROUP BY w.uid"
            )
        ).all()
    waits = sorted(
        (_utc(at) - created[uid]).total_seconds() for uid, at in planned if uid in created
    )
    return _quantiles(waits)


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _quantiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    pick = lambda q: round(values[min(len(values) - 1, int(q * len(values)))], 1)  # noqa: E731
    return {
        "n": len(values),
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p99": pick(0.99),
        "max": round(values[-1], 1),
    }


def lives(samples: list[tuple[float, str, int, float]]) -> list[dict[str, Any]]:
    """Each replica process's memory over its life, longest-lived first: RSS at its first look,
    a minute in (after warming up), at its last look and at most."""
    by: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for at, name, pid, rss in samples:
        by.setdefault((name, pid), []).append((at, rss))
    out = [
        {
            "replica": name,
            "pid": pid,
            "from_s": points[0][0],
            "to_s": points[-1][0],
            "first_mib": points[0][1],
            "after_1min_mib": next((r for a, r in points if a >= points[0][0] + 60), None),
            "last_mib": points[-1][1],
            "max_mib": max(r for _, r in points),
        }
        for (name, pid), points in by.items()
    ]
    return sorted(out, key=lambda life: life["from_s"] - life["to_s"])
