"""Watch the on-prem cluster and keep the part of the Snapshot the decision needs.

List + watch of Jobs, PyTorchJobs, Pods, Nodes, Namespaces and ResourceQuotas through the
official client (raw JSON, so that 10,000 pods are not 10,000 model objects), resuming from the
last resourceVersion, relisting after 410 Expired, reconnecting with bounded back-off after a
dropped connection. Pods are indexed by owner and each workload's summary is recomputed only when
it or one of its pods changed. `Observer.workloads()` and `Observer.onprem()` build the decision's
input; malformed burst annotations become a Warning Event on the job, never a crash.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from burst.clock import Clock
from burst.duration import DurationError, parse_duration
from burst.events import EventRecorder
from burst.model import GPU_PRODUCT_LABEL, GPU_PRODUCTS, OnPrem, RunningWorkload, Workload
from burst.money import Money
from burst.quantity import quantity

log = logging.getLogger(__name__)
Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
DEFAULT_RUNNING = timedelta(hours=4)


class Expired(Exception):
    """The watch's resourceVersion was compacted away: relist."""


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


# --- one resource ---------------------------------------------------------------------------------


class ResourceCache:
    """A list+watch mirror of one kind of object, keyed by uid."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        on_event: Callable[[str, Obj], None],
        *,
        watch_timeout: int = 300,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name, self._list, self._on_event = name, list_fn, on_event
        self.items: dict[str, Obj] = {}
        self.resource_version: str | None = None
        self.relists = self.reconnects = 0
        self.synced = threading.Event()
        self._timeout, self._max_backoff, self._sleep = watch_timeout, max_backoff, sleep

    def relist(self) -> None:
        response = self._list(_preload_content=False)
        data = json.loads(response.data)
        fresh = {_meta(o)["uid"]: o for o in data.get("items") or []}
        for uid in [u for u in self.items if u not in fresh]:
            self._on_event("DELETED", self.items.pop(uid))
        for uid, obj in fresh.items():
            self._on_event("MODIFIED" if uid in self.items else "ADDED", obj)
            self.items[uid] = obj
        self.resource_version = str(_meta(data).get("resourceVersion") or "")
        self.relists += 1
        self.synced.set()

    def watch_once(self, stop: threading.Event) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        response = self._list(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout,
            _preload_content=False,
        )
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if stop.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired(obj.get("message", "expired"))
                    raise ConnectionError(f"watch {self.name}: {obj.get('message')}")
                self.resource_version = str(
                    _meta(obj).get("resourceVersion") or self.resource_version
                )
                if event["type"] == "BOOKMARK":
                    continue
                uid = str(_meta(obj).get("uid"))
                if event["type"] == "DELETED":
                    self.items.pop(uid, None)
                else:
                    self.items[uid] = obj
                self._on_event(event["type"], obj)
        finally:
            response.release_conn()

    def run(self, stop: threading.Event) -> None:
        """Mirror until `stop`: relist on 410 and at start, reconnect with back-off on errors."""
        backoff = 0.5
        while not stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once(stop)
                backoff = 0.5
            except Expired:
                self.resource_version = None  # compacted: a fresh list, then watch from there
            except Exception as exc:
                self.reconnects += 1
                log.warning(
                    "watch %s: %s; reconnecting in %.1f s",
                    self.name,
                    exc.__class__.__name__,
                    backoff,
                )
                self._sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)


# --- GPU requests ---------------------------------------------------------------------------------


def catalog_gpu(product: str) -> str | None:
    """The catalog accelerator for an `nvidia.com/gpu.product` label value (Tesla-V100-SXM2-16GB -> V100)."""
    exact = {v: k for k, v in GPU_PRODUCTS.items() if k != "H100-MEGA"}
    if product in exact:
        return exact[product]
    upper = product.upper()
    for name, memory in (("A100", "80GB"), ("V100", "32GB")):
        if name in upper:
            return f"{name}-{memory}" if memory in upper else name
    for name in (
        "H200",
        "H100",
        "B200",
        "L40S",
        "A10G",
        "A10",
        "T4G",
        "T4",
        "L4",
        "P100",
        "P4",
        "K80",
        "M60",
    ):
        if name in upper.replace("-", " ").split() or f"-{name}" in upper or upper.startswith(name):
            return "T4g" if name == "T4G" else name
    return None


@dataclass(frozen=True)
class PodShape:
    accelerator: str | None  # catalog name, "mig-1g.5gb", "gpu.shared", or None for any GPU
    gpus: int
    cpu: float
    memory_gib: float


def pod_shape(template: Mapping[str, Any]) -> PodShape | None:
    """What one pod of a template asks for; None when it asks for no GPU."""
    spec = template.get("spec") or {}
    gpus, cpu, memory, kind = 0, 0.0, 0.0, None
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for name, value in wanted.items():
            if name == GPU:
                gpus += int(quantity(value))
            elif name == SHARED_GPU:
                gpus, kind = gpus + int(quantity(value)), "gpu.shared"
            elif name.startswith(MIG_PREFIX):
                gpus, kind = gpus + int(quantity(value)), name.removeprefix("nvidia.com/")
        requests = resources.get("requests") or resources.get("limits") or {}
        cpu += quantity(requests.get("cpu"))
        memory += quantity(requests.get("memory")) / 2**30
    if gpus == 0:
        return None
    if kind is None:
        product = (spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        for term in terms:
            for expr in term.get("matchExpressions") or []:
                if (
                    expr.get("key") == GPU_PRODUCT_LABEL
                    and expr.get("operator") == "In"
                    and expr.get("values")
                ):
                    product = product or expr["values"][0]
        kind = catalog_gpu(product) if product else None
    return PodShape(kind, gpus, cpu, memory)


def workload_shape(obj: Mapping[str, Any]) -> tuple[PodShape, int] | None:
    """(pod shape, pods) of a Job or PyTorchJob that asks for GPUs."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        shapes = []
        pods = 0
        for rspec in (spec.get("pytorchReplicaSpecs") or {}).values():
            shape = pod_shape((rspec or {}).get("template") or {})
            if shape is not None:
                shapes.append(shape)
                pods += int((rspec or {}).get("replicas", 1))
        if not shapes:
            return None
        return max(shapes, key=lambda s: s.gpus), pods
    shape = pod_shape(spec.get("template") or {})
    if shape is None:
        return None
    parallelism = int(spec.get("parallelism", 1) or 1)
    completions = spec.get("completions")
    return shape, min(parallelism, int(completions)) if completions else parallelism


# --- the observer ---------------------------------------------------------------------------------


@dataclass
class _Summary:
    workload: Workload | None  # pending and burstable-or-not, None if not pending
    running: list[RunningWorkload]


class Observer:
    """The on-prem cluster as the decision sees it, kept current by ResourceCaches."""

    def __init__(
        self,
        api_client: Any,
        clock: Clock,
        events: EventRecorder | None = None,
        *,
        label_prefix: str = "burst.dev/",
        team_label: str = "burst.dev/team",
        currency_for: Callable[[str, Mapping[str, str]], str] = lambda ns, labels: "USD",
        sleep: Callable[[float], None] = time.sleep,
        watch_timeout: int = 300,
    ) -> None:
        from kubernetes import client

        self.clock, self.events = clock, events
        self.prefix, self.team_label, self.currency_for = label_prefix, team_label, currency_for
        core, batch, custom = (
            client.CoreV1Api(api_client),
            client.BatchV1Api(api_client),
            client.CustomObjectsApi(api_client),
        )
        self._lock = threading.RLock()
        self._pods_of: dict[str, set[str]] = defaultdict(set)
        self._owner_of: dict[str, str] = {}
        self._dirty: set[str] = set()
        self._summaries: dict[str, _Summary] = {}
        self._name_index: dict[str, tuple[tuple[Any, ...], dict[str, Obj]]] = {}

        def cache(
            name: str, fn: Callable[..., Any], on: Callable[[str, Obj], None]
        ) -> ResourceCache:
            return ResourceCache(name, fn, on, sleep=sleep, watch_timeout=watch_timeout)

        def pytorchjobs(**kw: Any) -> Any:
            return custom.list_cluster_custom_object("kubeflow.org", "v1", "pytorchjobs", **kw)

        self.jobs = cache("jobs", batch.list_job_for_all_namespaces, self._on_workload)
        self.pytorchjobs = cache("pytorchjobs", pytorchjobs, self._on_workload)
        self.pods = cache("pods", core.list_pod_for_all_namespaces, self._on_pod)
        self.nodes = cache("nodes", core.list_node, self._on_other)
        self.namespaces = cache("namespaces", core.list_namespace, self._on_other)
        self.quotas = cache(
            "resourcequotas", core.list_resource_quota_for_all_namespaces, self._on_other
        )
        self.caches = [
            self.jobs,
            self.pytorchjobs,
            self.pods,
            self.nodes,
            self.namespaces,
            self.quotas,
        ]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.changed = threading.Event()  # set on every workload or pod change, for the service

    # -- running --

    def start(self) -> Observer:
        for c in self.caches:
            t = threading.Thread(
                target=c.run, args=(self._stop,), name=f"watch-{c.name}", daemon=True
            )
            t.start()
            self._threads.append(t)
        return self

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(c.synced.wait(max(0.0, deadline - time.monotonic())) for c in self.caches)

    def stop(self) -> None:
        self._stop.set()

    # -- events --

    def _on_workload(self, type_: str, obj: Obj) -> None:
        self.changed.set()
        with self._lock:
            uid = _meta(obj)["uid"]
            self._dirty.add(uid)
            if type_ == "DELETED":
                self._summaries.pop(uid, None)

    def _on_pod(self, type_: str, pod: Obj) -> None:
        self.changed.set()
        with self._lock:
            uid = _meta(pod)["uid"]
            owner = (
                next(
                    (
                        r.get("uid")
                        for r in _meta(pod).get("ownerReferences") or []
                        if r.get("controller")
                    ),
                    None,
                )
                or uid
            )
            if type_ == "DELETED":
                self._pods_of[owner].discard(uid)
                self._owner_of.pop(uid, None)
            else:
                self._pods_of[owner].add(uid)
                self._owner_of[uid] = owner
            self._dirty.add(owner)

    def _on_other(self, type_: str, obj: Obj) -> None:
        with self._lock:  # a namespace label or a quota may change any workload's view
            self._dirty.update(self.jobs.items)
            self._dirty.update(self.pytorchjobs.items)

    # -- the snapshot --

    def _team(self, namespace: str, labels: Mapping[str, str]) -> str:
        if self.team_label in labels:
            return str(labels[self.team_label])
        ns = self._by_name(self.namespaces).get(namespace)
        return str(((_meta(ns).get("labels") or {}) if ns else {}).get(self.team_label, namespace))

    def _by_name(self, cache: ResourceCache) -> dict[str, Obj]:
        """Objects of a cluster-scoped cache by name, rebuilt only when the cache changed."""
        key = (cache.name, cache.resource_version, len(cache.items))
        found = self._name_index.get(cache.name)
        if found is None or found[0] != key:
            found = (key, {_meta(o).get("name", ""): o for o in list(cache.items.values())})
            self._name_index[cache.name] = found
        return found[1]

    def _quota_blocked(self, namespace: str, gpus: int) -> bool:
        for quota in self.quotas.items.values():
            if _meta(quota).get("namespace") != namespace:
                continue
            status = quota.get("status") or {}
            for key in ("requests.nvidia.com/gpu", "limits.nvidia.com/gpu"):
                hard = (status.get("hard") or (quota.get("spec") or {}).get("hard") or {}).get(key)
                if hard is not None:
                    used = quantity((status.get("used") or {}).get(key, "0"))
                    if used + gpus > quantity(hard):
                        return True
        return False

    def _annotation(self, obj: Obj, key: str, parse: Callable[[str], Any]) -> Any:
        value = (_meta(obj).get("annotations") or {}).get(self.prefix + key)
        if value is None:
            return None
        try:
            return parse(value)
        except (ValueError, DurationError, ArithmeticError) as exc:
            if self.events is not None:
                self.events.record(
                    obj,
                    "Warning",
                    "InvalidBurstAnnotation",
                    f"{self.prefix}{key}={value!r} is ignored: {exc}",
                )
            return None

    def _summarise(self, obj: Obj) -> _Summary:
        meta = _meta(obj)
        uid, namespace = meta["uid"], meta.get("namespace", "")
        labels = meta.get("labels") or {}
        shaped = workload_shape(obj)
        if shaped is None:
            return _Summary(None, [])
        shape, pods_wanted = shaped
        pods = [
            self.pods.items[p] for p in sorted(self._pods_of.get(uid, ())) if p in self.pods.items
        ]
        created = parse_time(meta.get("creationTimestamp")) or self.clock.now()
        runtime = self._annotation(obj, "expected-runtime", parse_duration)
        running = []
        for pod in pods:
            status = pod.get("status") or {}
            if status.get("phase") == "Running":
                node = self._by_name(self.nodes).get((pod.get("spec") or {}).get("nodeName", ""))
                product = catalog_gpu(
                    ((_meta(node).get("labels") or {}) if node else {}).get(GPU_PRODUCT_LABEL, "")
                )
                started = parse_time(status.get("startTime")) or self.clock.now()
                running.append(
                    RunningWorkload(
                        _meta(pod)["uid"],
                        product or shape.accelerator or "",
                        shape.gpus,
                        started + (runtime or DEFAULT_RUNNING),
                    )
                )
        conditions = {
            c.get("type"): c.get("status")
            for c in (obj.get("status") or {}).get("conditions") or []
        }
        if any(conditions.get(t) == "True" for t in ("Complete", "Failed", "Succeeded")):
            return _Summary(None, [])
        spec = obj.get("spec") or {}
        suspended = bool(
            spec.get("suspend")
            if obj.get("kind") == "Job"
            else (spec.get("runPolicy") or {}).get("suspend")
        )
        burstable = labels.get(self.prefix + "burstable") == "true"
        unschedulable = [
            parse_time(c.get("lastTransitionTime")) or created
            for pod in pods
            for c in (pod.get("status") or {}).get("conditions") or []
            if (pod.get("status") or {}).get("phase") == "Pending"
            and c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ]
        active = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
        quota_blocked = (
            not suspended
            and len(active) < pods_wanted
            and self._quota_blocked(namespace, shape.gpus * (pods_wanted - len(active)))
        )
        pending = (suspended and burstable) or bool(unschedulable) or quota_blocked
        if not pending or running:
            return _Summary(None, running)
        deadline = self._annotation(obj, "deadline", lambda v: _deadline(v, created))
        currency = self.currency_for(namespace, labels)
        max_cost = self._annotation(obj, "max-cost", lambda v: _money(v, currency))
        return _Summary(
            Workload(
                uid=uid,
                kind=obj["kind"],
                namespace=namespace,
                name=meta["name"],
                team=self._team(namespace, labels),
                gpus_per_pod=shape.gpus,
                pods=pods_wanted,
                created=created,
                pending_since=min(unschedulable) if unschedulable else created,
                accelerator=shape.accelerator,
                burstable=burstable,
                labels=dict(labels),
                deadline=deadline,
                expected_runtime=runtime,
                max_cost=max_cost,
                cpu_per_pod=shape.cpu,
                memory_gib_per_pod=shape.memory_gib,
                quota_blocked=quota_blocked,
            ),
            running,
        )

    def _refresh(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            for uid in dirty:
                obj = self.jobs.items.get(uid) or self.pytorchjobs.items.get(uid)
                if obj is None:
                    self._summaries.pop(uid, None)
                else:
                    self._summaries[uid] = self._summarise(obj)

    def workloads(self) -> tuple[Workload, ...]:
        """Pending GPU workloads (burstable or not: the on-prem queue needs them all)."""
        self._refresh()
        with self._lock:
            found = [s.workload for s in self._summaries.values() if s.workload is not None]
        return tuple(sorted(found, key=lambda w: (w.created, w.uid)))

    def onprem(self) -> OnPrem:
        """GPUs per catalog product from the nodes, and what runs on them."""
        self._refresh()
        capacity: dict[str, int] = defaultdict(int)
        for node in list(self.nodes.items.values()):
            product = catalog_gpu((_meta(node).get("labels") or {}).get(GPU_PRODUCT_LABEL, ""))
            alloc = ((node.get("status") or {}).get("allocatable") or {}).get(GPU)
            if product and alloc:
                capacity[product] += int(quantity(alloc))
        with self._lock:
            running = tuple(r for s in self._summaries.values() for r in s.running)
        return OnPrem(dict(capacity), running)


def _deadline(value: str, created: datetime) -> datetime:
    try:
        return created + parse_duration(value)
    except DurationError:
        parsed = parse_time(value)
        if parsed is None:
            raise ValueError("expected an RFC 3339 time or a duration such as 6h") from None
        return parsed


def _money(value: str, currency: str) -> Money:
    text = value.strip()
    if " " in text:
        return Money.parse(text)
    return Money.of(Decimal(text), currency)
