"""The soak's invariant checker: burst's promises, checked from outside against the clusters, the
simulated clouds' state file and the database, while the service runs (`tick`, every second or
two) and once it has drained (`final`). Each broken promise is counted with an example; the soak
passes only with every count at zero.

- `two_copies`: a workload with two copies in the cloud cluster that have a pod Running, or one
  while its on-prem original has a pod Running, on two looks in a row (one look may fall between
  a requeue's deletion of the copy and the original's resumption).
- `copy_created_twice`: one copy name (one workload and attempt) seen with two object uids on
  the checker's looks.
- `work_lost_to_burst`: a copy's pod failed with its node (pod GC's DisruptionTarget mark) on a
  node that burst itself removed (a pool deleted or shrunk under running work). Nodes reclaimed
  as spot or deleted out of band don't count, nor pools burst deleted because their cluster was
  lost (their work was requeued first).
- `orphan_pool`: a pool tagged with the installation alive in a cloud with no live row for longer
  than `orphan_grace` (the service's, plus its collection interval) and four passes (of the
  length the replicas' metrics report lately), or any such pool left at the end.
- `foreign_pool_touched`: the pool of another installation deleted or resized.
- `budget_exceeded`: a hard budget's posted spend in its period above its amount.
- `cap_exceeded`: more live pools of a policy of the installation in the clouds than its
  maxPools, or a pool with more nodes than its maxNodesPerPool.
- `ledger_changed`: a ledger row updated or deleted once seen.
- `ledger_mismatch`: at the end, a pool's ledger total off the integral of its nodes' lifetimes x
  the offer's price under the cloud's billing rule by more than the service can see (its pass
  interval per node, either side, and a cent; a pool deleted out of band or lost with its cluster
  too, however late burst saw it gone).
- `reason_missing`: at the end, a hostile job burst refused without a BurstRefused Event, a
  malformed job without an InvalidBurstAnnotation Event, a job the last plan skipped without a
  NotBursting Event.
- `credential_leaked`: at the end, the API token or the Secret's value in the service's logs, the
  database, the API's answers, the on-prem Events or a report.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client
from sqlalchemy import Engine, inspect, text

from burst.cloud import catalog
from burst.kube.translate import ORIGIN_UID
from burst.model import TAG_OWNER, TAG_POLICY, OfferKey
from burst.money.meter import BILLING

KINDS = (
    "two_copies",
    "copy_created_twice",
    "work_lost_to_burst",
    "orphan_pool",
    "foreign_pool_touched",
    "budget_exceeded",
    "cap_exceeded",
    "ledger_changed",
    "ledger_mismatch",
    "reason_missing",
    "credential_leaked",
)


@dataclass
class Checker:
    engine: Engine
    local: Any  # ApiClient of the on-prem cluster
    remote: Any  # ApiClient of the cloud cluster (direct, not through the gate)
    state: Path  # the simulated clouds' state file
    installation: str
    foreign: tuple[str, str]  # (target, name) of another installation's pool
    orphan_grace: timedelta
    pass_interval: timedelta
    budgets: dict[str, int]  # hard budget namespace -> amount in USD micros per day
    max_pools: Mapping[str, int]  # per policy
    max_nodes: int
    # The mean pass of the last minutes as the replicas' metrics tell (the harness sets it): an
    # orphan is collected by a pass, and under load a pass takes many seconds, not one.
    recent_pass: timedelta = timedelta(0)
    violations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    checks: int = 0
    _copy_uids: dict[str, str] = field(default_factory=dict)
    _suspect: set[str] = field(default_factory=set)
    _lost: set[str] = field(default_factory=set)
    _unbacked: dict[str, datetime] = field(default_factory=dict)
    _ledger: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    _seen: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    def _broken(self, kind: str, example: str) -> None:
        self.violations[kind] += 1
        if len(self.examples[kind]) < 5:
            self.examples[kind].append(example)

    def cloud(self) -> dict[str, Any]:
        """The clouds' state, with every pool and ended node seen before: the simulated clouds
        forget them an hour after they end, as a real one does, and the bills need them all."""
        now: dict[str, Any] = json.loads(self.state.read_text()) if self.state.exists() else {}
        for p in now.get("pools", []):
            key = (p["target"], p["spec"]["name"], p["created"])  # a name reused is a new pool
            listed = {n["name"] for n in p["gone"]}
            before = self._seen.get(key, {"gone": []})["gone"]
            p["gone"] = [n for n in before if n["name"] not in listed] + p["gone"]
            self._seen[key] = p
        return {**now, "pools": list(self._seen.values())}

    # -- while it runs --

    def tick(self) -> None:
        self.checks += 1
        cloud = self.cloud()
        self._copies()
        self._nodes_lost(cloud)
        self._pools(cloud, final=False)
        with self.engine.connect() as db:
            self._budgets(db)
            self._ledger_rows(db)

    def _copies(self) -> None:
        remote_running = _running(self.remote)
        copies = _items(client.BatchV1Api(self.remote).list_job_for_all_namespaces)
        copies += _items(
            lambda **kw: client.CustomObjectsApi(self.remote).list_cluster_custom_object(
                "kubeflow.org", "v1", "pytorchjobs", **kw
            )
        )
        running: dict[str, list[str]] = defaultdict(list)
        for c in copies:
            meta = c["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            seen = self._copy_uids.setdefault(key, meta["uid"])
            if seen != meta["uid"]:
                self._broken("copy_created_twice", key)
                self._copy_uids[key] = meta["uid"]
            origin = (meta.get("labels") or {}).get(ORIGIN_UID)
            if origin and key in remote_running and not _finished(c):
                running[origin].append(key)
        originals = _items(client.BatchV1Api(self.local).list_job_for_all_namespaces)
        originals += _items(
            lambda **kw: client.CustomObjectsApi(self.local).list_cluster_custom_object(
                "kubeflow.org", "v1", "pytorchjobs", **kw
            )
        )
        suspect = {uid for uid, keys in running.items() if len(keys) > 1}
        local_running = _running(self.local)
        for o in originals:
            meta = o["metadata"]
            if meta["uid"] in running and f"{meta['namespace']}/{meta['name']}" in local_running:
                suspect.add(meta["uid"])
        for uid in suspect & self._suspect:
            self._broken("two_copies", f"{uid}: {running.get(uid)}")
        self._suspect = suspect

    def _nodes_lost(self, cloud: dict[str, Any]) -> None:
        ended = {n["name"]: n["ended_by"] for p in cloud.get("pools", []) for n in p["gone"]}
        with self.engine.connect() as db:  # deleted with their cluster lost: work requeued
            lost_with = [
                name
                for (name,) in db.execute(
                    text("SELECT name FROM pools WHERE state_reason LIKE '%stopped answering%'")
                )
            ]
        for pod in _items(client.CoreV1Api(self.remote).list_pod_for_all_namespaces):
            status, meta = pod.get("status") or {}, pod["metadata"]
            node = (pod.get("spec") or {}).get("nodeName")
            if not _gone_with_node(status) or meta["uid"] in self._lost:
                continue
            self._lost.add(meta["uid"])
            pool = next((p for p in lost_with if node and node.startswith(p + "-")), None)
            if ended.get(node) in ("burst", "shrunk") and pool is None:
                self._broken("work_lost_to_burst", f"{meta['namespace']}/{meta['name']} on {node}")

    def _pools(self, cloud: dict[str, Any], final: bool) -> None:
        with self.engine.connect() as db:
            live = {
                name
                for (name,) in db.execute(
                    text("SELECT name FROM pools WHERE state NOT IN ('deleted', 'failed')")
                )
            }
        now = datetime.now(UTC)
        allowed = self.orphan_grace + 4 * max(self.pass_interval, self.recent_pass)
        mine = [
            p
            for p in cloud.get("pools", [])
            if p["tags"].get(TAG_OWNER) == self.installation and not p["deleted"]
        ]
        up = Counter(p["tags"].get(TAG_POLICY) for p in mine)
        for policy, count in up.items():
            if count > self.max_pools.get(policy or "", 0):
                self._broken(
                    "cap_exceeded", f"{count} pools of {policy} up, maxPools {self.max_pools}"
                )
        for p in mine:
            if len(p["nodes"]) > self.max_nodes:
                self._broken("cap_exceeded", f"{p['spec']['name']}: {len(p['nodes'])} nodes")
        for p in cloud.get("pools", []):
            name = p["spec"]["name"]
            if (p["target"], name) == self.foreign:
                if p["deleted"] or len(p["nodes"]) != p["spec"]["nodes"]:
                    self._broken("foreign_pool_touched", name)
                continue
            if p["tags"].get(TAG_OWNER) != self.installation or p["deleted"]:
                self._unbacked.pop(name, None)
                continue
            if final:
                self._broken("orphan_pool", f"{name} left in {p['target']}")
            elif name in live:
                self._unbacked.pop(name, None)
            elif now - self._unbacked.setdefault(name, now) > allowed:
                self._broken("orphan_pool", f"{name} without a row since {self._unbacked[name]}")
                self._unbacked[name] = now

    def _budgets(self, db: Any) -> None:
        day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        for namespace, amount in self.budgets.items():
            spent = db.execute(
                text(
                    "SELECT COALESCE(SUM(amount_micros), 0) FROM ledger_entries "
                    "WHERE namespace = :ns AND period_start >= :day AND currency = 'USD'"
                ),
                {"ns": namespace, "day": day},
            ).scalar_one()
            if spent > amount:
                self._broken("budget_exceeded", f"{namespace}: {spent} > {amount} micro-USD")

    def _ledger_rows(self, db: Any) -> None:
        for row in db.execute(text("SELECT * FROM ledger_entries ORDER BY id")):
            values = tuple(row)
            before = self._ledger.setdefault(row.id, values)
            if before != values:
                self._broken("ledger_changed", f"row {row.id}")
                self._ledger[row.id] = values
        with self.engine.connect() as db2:
            ids = {i for (i,) in db2.execute(text("SELECT id FROM ledger_entries"))}
        for gone in set(self._ledger) - ids:
            self._broken("ledger_changed", f"row {gone} deleted")
            del self._ledger[gone]

    # -- once drained --

    def final(
        self,
        secrets: list[str],
        texts: list[str],
        hostile: list[str],
        malformed: list[str],
        skipped: list[str],
    ) -> None:
        """`secrets` must be in none of `texts` (logs, API answers, reports) nor the database
        nor the Events; `hostile`, `malformed` and `skipped` are namespace/name of fed jobs."""
        self.tick()
        cloud = self.cloud()
        self._pools(cloud, final=True)
        self._bills(cloud)
        self._reasons(hostile, malformed, skipped)
        self._leaks(secrets, texts)

    def _bills(self, cloud: dict[str, Any]) -> None:
        offers = catalog.shipped()
        with self.engine.connect() as db:
            posted: dict[str, int] = dict(
                db.execute(
                    text("SELECT pool, SUM(amount_micros) FROM ledger_entries GROUP BY pool")
                ).all()
            )
            rows = {
                name: f"{state} ({reason})"
                for name, state, reason in db.execute(
                    text("SELECT name, state, state_reason FROM pools")
                )
            }
        for p in cloud.get("pools", []):
            if p["tags"].get(TAG_OWNER) != self.installation:
                continue
            key = OfferKey(**p["spec"]["offer"])
            offer = offers.get(key)
            assert offer is not None, key
            rule = BILLING[key.cloud]
            per_s = offer.hourly.micros / 3600
            truth, slack = 0.0, 10_000.0  # a cent
            # A pool gone behind burst's back is billed to its instances' ends as the cloud
            # lists them, however late burst's scan saw it gone.
            unseen = self.pass_interval * 2
            for node in p["gone"] + p["nodes"]:
                start = datetime.fromisoformat(node["launched"])
                end = datetime.fromisoformat(node["ended"]) if node["ended"] else datetime.now(UTC)
                truth += rule.billable((end - start).total_seconds()) * per_s
                slack += unseen.total_seconds() * per_s
            found = int(posted.get(p["spec"]["name"]) or 0)
            if abs(found - truth) > slack:
                self._broken(
                    "ledger_mismatch",
                    f"{p['spec']['name']}: ledger {found} micro-USD, nodes x price {truth:.0f}; "
                    f"in the cloud: {'deleted by ' + p['deleted_by'] if p['deleted'] else 'up'}; "
                    f"its row: {rows.get(p['spec']['name'], 'none')}",
                )

    def _reasons(self, hostile: list[str], malformed: list[str], skipped: list[str]) -> None:
        events = _items(client.CoreV1Api(self.local).list_event_for_all_namespaces)
        told = {
            (e["involvedObject"].get("namespace"), e["involvedObject"].get("name"), e["reason"])
            for e in events
        }
        with self.engine.connect() as db:
            refused = {
                f"{ns}/{name}"
                for ns, name in db.execute(
                    text(
                        "SELECT namespace, name FROM workloads WHERE state_reason LIKE 'refused:%'"
                    )
                )
            }
        for key in hostile:
            ns, name = key.split("/")
            if key in refused and (ns, name, "BurstRefused") not in told:
                self._broken("reason_missing", f"{key} refused without an Event")
        for key in malformed:
            ns, name = key.split("/")
            if (ns, name, "InvalidBurstAnnotation") not in told:
                self._broken("reason_missing", f"{key}: its bad deadline not said")
        for key in skipped:
            ns, name = key.split("/")
            if (ns, name, "NotBursting") not in told:
                self._broken("reason_missing", f"{key} skipped without an Event")

    def _leaks(self, secrets: list[str], texts: list[str]) -> None:
        events = _items(client.CoreV1Api(self.local).list_event_for_all_namespaces)
        places = {f"text {i}": t for i, t in enumerate(texts)}
        places["events"] = json.dumps(events)
        with self.engine.connect() as db:
            for table in inspect(db).get_table_names():
                rows = db.execute(text(f'SELECT * FROM "{table}"')).all()
                places[f"table {table}"] = repr(rows)
        for secret in secrets:
            for where, body in places.items():
                if secret in body:
                    self._broken("credential_leaked", f"in {where}")


def _items(call: Any) -> list[dict[str, Any]]:
    response = call(_preload_content=False)
    return list(json.loads(response.data).get("items") or [])


def _running(api: Any) -> set[str]:
    """namespace/name of every Job and PyTorchJob with a pod Running (by the labels their
    controllers give their pods)."""
    found = set()
    for pod in _items(client.CoreV1Api(api).list_pod_for_all_namespaces):
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        owner = labels.get("batch.kubernetes.io/job-name") or labels.get(
            "training.kubeflow.org/job-name"
        )
        if owner:
            found.add(f"{meta['namespace']}/{owner}")
    return found


def _finished(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed", "Succeeded") and c.get("status") == "True"
        for c in conditions
    )


def _gone_with_node(status: dict[str, Any]) -> bool:
    """Whether pod GC failed the pod because its node was deleted (its DisruptionTarget mark)."""
    return any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == "DeletionByPodGC"
        for c in status.get("conditions") or []
    )
