"""Observe the on-prem cluster: the part of the Snapshot the decision needs.

Six watches (watch.py) of Jobs, PyTorchJobs, Pods, Nodes, Namespaces and ResourceQuotas. Pods are
indexed by owner and each workload's summary is recomputed only when it or one of its pods changed.
`Observer.workloads()` and `Observer.onprem()` build the decision's input; malformed burst
annotations become a Warning Event on the job, never a crash. Workloads seen to succeed teach
runtime estimates (burst/runtimes.py) for those that declare none; the history is what the cluster
still holds (finished Jobs stay until their TTL), learned again after a restart.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from burst.clock import Clock
from burst.kube.annotations import LONGEST, BurstAnnotations, parse_time, read_annotations
from burst.kube.events import EventRecorder
from burst.kube.quantity import quantity
from burst.kube.shapes import GPU, PodShape, catalog_gpu, workload_shape
from burst.kube.translate import fails_on_reclaim
from burst.kube.watch import Obj, ResourceCache, meta_of, onprem_caches
from burst.model import (
    GPU_PRODUCT_LABEL,
    KUEUE_QUEUE_LABEL,
    OnPrem,
    OnPremNode,
    RunningWorkload,
    Workload,
)
from burst.runtimes import Learned

DEFAULT_RUNNING = timedelta(hours=4)


@dataclass
class _Summary:
    workload: Workload | None  # pending and burstable-or-not, None if not pending
    running: list[RunningWorkload]
    namespace: str = ""


class RunHistory:
    """What the workloads seen to succeed taught (burst/runtimes.py), each once while the cluster
    holds it (a re-list teaches nothing twice), and the namespaces it taught something new."""

    def __init__(self) -> None:
        self.learned = Learned()
        self.taught: set[str] = set()
        self._seen: set[str] = set()

    def learn(self, obj: Obj, pods: list[Obj], namespace: str, gpus: int, user: str) -> None:
        uid = meta_of(obj)["uid"]
        if uid in self._seen:
            return
        seconds = succeeded_in(obj, pods)
        if seconds is None:
            return
        self._seen.add(uid)
        self.learned.observe(namespace, meta_of(obj).get("name", ""), gpus, seconds, user)
        self.taught.add(namespace)

    def forget(self, uid: str) -> None:
        self._seen.discard(uid)

    def runtime(
        self,
        said: BurstAnnotations,
        created: datetime,
        namespace: str,
        name: str,
        gpus: int,
        user: str,
    ) -> tuple[timedelta | None, str, timedelta | None]:
        """A pending workload's runtime, where it came from, and the longest of the runs where
        it is learned: declared, else learned (at most the time from its creation to its
        deadline), else none."""
        if said.expected_runtime is not None:
            return said.expected_runtime, "declared", None
        allowed = None if said.deadline is None else said.deadline - created
        learned = self.learned.estimate(namespace, name, gpus, user, allowed)
        if learned is None:
            return None, "", None
        return *learned, self.learned.longest(namespace, name, gpus, user)

    def retell(self, summaries: Mapping[str, _Summary]) -> set[str]:
        """The pending and running workloads of the namespaces taught something new since the
        last call: their estimates changed."""
        taught, self.taught = self.taught, set()
        if not taught:
            return set()
        return {
            uid
            for uid, s in summaries.items()
            if s.namespace in taught and (s.workload or s.running)
        }


def _forget_pod(pods_of: dict[str, set[str]], owner: str, uid: str) -> None:
    """A deleted pod, and with its owner's last pod the owner: an empty set per job ever seen
    added up over months of service."""
    pods = pods_of.get(owner)
    if pods is not None:
        pods.discard(uid)
        if not pods:
            del pods_of[owner]


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
        self.clock, self.events = clock, events
        self.prefix, self.team_label, self.currency_for = label_prefix, team_label, currency_for
        self._lock = threading.RLock()
        self._pods_of: dict[str, set[str]] = defaultdict(set)
        self._owner_of: dict[str, str] = {}
        self._dirty: set[str] = set()
        self._summaries: dict[str, _Summary] = {}
        self._name_index: dict[str, tuple[tuple[Any, ...], dict[str, Obj]]] = {}
        self._refused_for_quota: set[str] = set()  # workloads whose pods a quota refused
        self.history = RunHistory()
        self.caches = onprem_caches(
            api_client,
            {
                "workload": self._on_workload,
                "pod": self._on_pod,
                "other": self._on_other,
                "refusal": self._on_refusal,
            },
            sleep=sleep,
            watch_timeout=watch_timeout,
        )
        self.jobs, self.pytorchjobs, self.pods, self.nodes, self.namespaces, self.quotas = (
            self.caches[:6]
        )
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

    @property
    def synced(self) -> bool:
        """Every cache has listed once: before that, missing nodes would read as no capacity."""
        return all(c.synced.is_set() for c in self.caches)

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(c.synced.wait(max(0.0, deadline - time.monotonic())) for c in self.caches)

    def stop(self) -> None:
        self._stop.set()

    # -- events --

    def _on_workload(self, type_: str, obj: Obj) -> None:
        self.changed.set()
        with self._lock:
            uid = meta_of(obj)["uid"]
            self._dirty.add(uid)
            if type_ == "DELETED":
                self._summaries.pop(uid, None)
                self.history.forget(uid)

    def _on_pod(self, type_: str, pod: Obj) -> None:
        self.changed.set()
        with self._lock:
            uid = meta_of(pod)["uid"]
            owner = controller_uid(pod) or uid
            if type_ == "DELETED":
                _forget_pod(self._pods_of, owner, uid)
                self._owner_of.pop(uid, None)
            else:
                self._pods_of[owner].add(uid)
                self._owner_of[uid] = owner
            self._dirty.add(owner)

    def _on_refusal(self, type_: str, event: Obj) -> None:
        """A controller could not create a workload's pods for a quota (the Job controller's
        FailedCreate: "pods ... is forbidden: exceeded quota")."""
        if type_ != "DELETED" and "exceeded quota" in str(event.get("message", "")):
            uid = str((event.get("involvedObject") or {}).get("uid", ""))
            with self._lock:
                self._refused_for_quota.add(uid)
                self._dirty.add(uid)

    def _on_other(self, type_: str, obj: Obj) -> None:
        with self._lock:  # a namespace label or a quota may change any workload's view
            self._dirty.update(self.jobs.items)
            self._dirty.update(self.pytorchjobs.items)

    # -- the snapshot --

    def _team(self, namespace: str, labels: Mapping[str, str]) -> str:
        if self.team_label in labels:
            return str(labels[self.team_label])
        ns = self._by_name(self.namespaces).get(namespace)
        return str(
            ((meta_of(ns).get("labels") or {}) if ns else {}).get(self.team_label, namespace)
        )

    def _by_name(self, cache: ResourceCache) -> dict[str, Obj]:
        """Objects of a cluster-scoped cache by name, rebuilt only when the cache changed."""
        key = (cache.name, cache.resource_version, len(cache.items))
        found = self._name_index.get(cache.name)
        if found is None or found[0] != key:
            found = (key, {meta_of(o).get("name", ""): o for o in list(cache.items.values())})
            self._name_index[cache.name] = found
        return found[1]

    def _summarise(self, obj: Obj) -> _Summary:
        meta = meta_of(obj)
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
        said, problems = read_annotations(
            meta.get("annotations") or {},
            self.prefix,
            created,
            self.currency_for(namespace, labels),
        )
        if self.events is not None:
            for problem in problems:  # recorded once each: the recorder remembers
                self.events.record(obj, "Warning", "InvalidBurstAnnotation", problem)
        user = labels.get(self.prefix + "user", "")  # whose runs it learns from first
        if finished(obj):
            self.history.learn(obj, pods, namespace, shape.gpus * pods_wanted, user)
            return _Summary(None, [], namespace)
        runtime, source, longest = self.history.runtime(
            said, created, namespace, meta["name"], shape.gpus * pods_wanted, user
        )
        running = self._running(pods, shape, runtime)
        suspended = is_suspended(obj)
        burstable = labels.get(self.prefix + "burstable") == "true"
        unschedulable = unschedulable_since(pods, created)
        active = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
        # Held back by a quota: Kueue has not admitted it (it keeps a queued job suspended), a
        # namespace quota leaves no room for its missing pods, or its pods were refused for one.
        kueue_held = suspended and KUEUE_QUEUE_LABEL in labels
        quota_blocked = kueue_held or (
            not suspended
            and len(active) < pods_wanted
            and (
                namespace_quota_blocked(
                    self.quotas.items.values(),
                    namespace,
                    asked_of(shape, pods_wanted - len(active)),
                )
                or uid in self._refused_for_quota
            )
        )
        pending = (suspended and (burstable or kueue_held)) or bool(unschedulable) or quota_blocked
        if not pending or running:
            return _Summary(None, running, namespace)
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
                deadline=said.deadline,
                expected_runtime=runtime,
                runtime_source=source,
                longest_runtime=longest,
                max_cost=said.max_cost,
                cpu_per_pod=shape.cpu,
                memory_gib_per_pod=shape.memory_gib,
                quota_blocked=quota_blocked,
                fails_on_reclaim=fails_on_reclaim(obj),
            ),
            running,
            namespace,
        )

    def _running(
        self, pods: Iterable[Obj], shape: PodShape, runtime: timedelta | None
    ) -> list[RunningWorkload]:
        """The workload's running pods, each with the GPU product of its node and expected end."""
        running = []
        nodes = self._by_name(self.nodes)
        for pod in pods:
            status = pod.get("status") or {}
            if status.get("phase") != "Running":
                continue
            node = nodes.get((pod.get("spec") or {}).get("nodeName", ""))
            product = catalog_gpu(
                ((meta_of(node).get("labels") or {}) if node else {}).get(GPU_PRODUCT_LABEL, "")
            )
            started = parse_time(status.get("startTime")) or self.clock.now()
            running.append(
                RunningWorkload(
                    meta_of(pod)["uid"],
                    product or shape.accelerator or "",
                    shape.gpus,
                    started + (runtime or DEFAULT_RUNNING),
                    started,
                    (pod.get("spec") or {}).get("nodeName", ""),
                )
            )
        return running

    def _refresh(self) -> None:
        with self._lock:
            while self._dirty:
                dirty, self._dirty = self._dirty, set()
                for uid in dirty:
                    obj = self.jobs.items.get(uid) or self.pytorchjobs.items.get(uid)
                    if obj is None:
                        self._summaries.pop(uid, None)
                    else:
                        self._summaries[uid] = self._summarise(obj)
                # Estimates changed in these namespaces: their workloads are summarised again.
                self._dirty |= self.history.retell(self._summaries)

    def object(self, uid: str) -> Obj | None:
        """The cached Job or PyTorchJob with this uid (as last listed or watched), if any."""
        return self.jobs.items.get(uid) or self.pytorchjobs.items.get(uid)

    def workloads(self) -> tuple[Workload, ...]:
        """Pending GPU workloads (burstable or not: the on-prem queue needs them all)."""
        self._refresh()
        with self._lock:
            found = [s.workload for s in self._summaries.values() if s.workload is not None]
        return tuple(sorted(found, key=lambda w: (w.created, w.uid)))

    def onprem(self) -> OnPrem:
        """GPUs per catalog product and per node from the nodes, and what runs on them."""
        self._refresh()
        with self._lock:
            running = tuple(r for s in self._summaries.values() for r in s.running)
        return OnPrem.of_nodes(gpu_nodes(list(self.nodes.items.values())), running)


def asked_of(shape: PodShape, pods: int) -> dict[str, float]:
    """What `pods` more pods of `shape` add to a namespace's quota usage, by quota key (requests
    default to limits for GPUs; a Kubeflow profile's quota names CPU, memory, pods and GPUs)."""
    cpu, memory, gpus = shape.cpu * pods, shape.memory_gib * pods * 2**30, float(shape.gpus * pods)
    return {
        "cpu": cpu,
        "requests.cpu": cpu,
        "memory": memory,
        "requests.memory": memory,
        "requests.nvidia.com/gpu": gpus,
        "limits.nvidia.com/gpu": gpus,
        "pods": float(pods),
        "count/pods": float(pods),
    }


def namespace_quota_blocked(
    quotas: Iterable[Obj], namespace: str, asked: Mapping[str, float]
) -> bool:
    """Whether what is asked would exceed any ResourceQuota of `namespace`, on any key."""
    for quota in quotas:
        if meta_of(quota).get("namespace") != namespace:
            continue
        status = quota.get("status") or {}
        hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
        used = status.get("used") or {}
        for key, limit in hard.items():
            if asked.get(key) and quantity(used.get(key, "0")) + asked[key] > quantity(limit):
                return True
    return False


def finished(obj: Obj) -> bool:
    """A Job or PyTorchJob whose outcome is known (Complete, Failed or Succeeded)."""
    conditions = {
        c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or []
    }
    return any(conditions.get(t) == "True" for t in ("Complete", "Failed", "Succeeded"))


def succeeded_in(obj: Obj, pods: Iterable[Obj] = ()) -> int | None:
    """Seconds a Job or PyTorchJob that succeeded ran, else None: from its start (or its first
    pod's, when the cluster still holds its pods: a Job's startTime is when its controller took it
    up, before its pods waited to be scheduled) to its completion."""
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if not any(conditions.get(t) == "True" for t in ("Complete", "Succeeded")):
        return None
    try:
        start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
        began = [parse_time((p.get("status") or {}).get("startTime")) for p in pods]
    except ValueError:
        return None
    known = [b for b in began if b is not None]
    if start is not None and known:
        start = max(start, min(known))
    # Beyond LONGEST a run is a broken clock, not a runtime.
    if start is None or end is None or not timedelta(0) < end - start <= LONGEST:
        return None
    return int((end - start).total_seconds())


def is_suspended(obj: Obj) -> bool:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Job":
        return bool(spec.get("suspend"))
    return bool((spec.get("runPolicy") or {}).get("suspend"))


def unschedulable_since(pods: Iterable[Obj], created: datetime) -> list[datetime]:
    """When each pending pod was found unschedulable (PodScheduled=False, Unschedulable)."""
    return [
        parse_time(c.get("lastTransitionTime")) or created
        for pod in pods
        for c in (pod.get("status") or {}).get("conditions") or []
        if (pod.get("status") or {}).get("phase") == "Pending"
        and c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
    ]


def controller_uid(obj: Obj) -> str | None:
    """The uid of the object's controller (a pod's Job, say), from its owner references."""
    refs = meta_of(obj).get("ownerReferences") or []
    return next((str(r.get("uid")) for r in refs if r.get("controller")), None)


def gpu_nodes(nodes: Iterable[Obj]) -> tuple[OnPremNode, ...]:
    """Each node's allocatable GPUs, by catalog product from its GPU feature discovery label.
    A cordoned node takes no new pod (the scheduler's NodeUnschedulable filter: kubernetes
    pkg/scheduler/framework/plugins/nodeunschedulable), so it is left out: what runs there holds
    none of the GPUs a pending pod could have."""
    out = []
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        meta = meta_of(node)
        product = catalog_gpu((meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, ""))
        alloc = ((node.get("status") or {}).get("allocatable") or {}).get(GPU)
        if product and alloc:
            out.append(OnPremNode(meta.get("name", ""), product, int(quantity(alloc))))
    return tuple(sorted(out, key=lambda n: n.name))
