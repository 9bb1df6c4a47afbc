"""Watch: one resource of the on-prem cluster kept current in memory (an informer).

List + watch through the official client (raw JSON, so that 10,000 pods are not 10,000 model
objects), resuming from the last resourceVersion, relisting after 410 Expired, reconnecting with
bounded back-off after a dropped connection. observe.py builds the decision's view from six of them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from burst.kube.connect import watch_timeout

log = logging.getLogger(__name__)
Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
DEFAULT_RUNNING = timedelta(hours=4)


class Expired(Exception):
    """The watch's resourceVersion was compacted away: relist."""


def meta_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


PAGE = 500  # items per list page (client-go's reflector asks for as many)


def trimmed(obj: Obj) -> Obj:
    """What the cache keeps of an object: all but metadata.managedFields (often half its size,
    and nothing burst reads), as controller-runtime's and client-go's transforms drop it."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


# --- one resource ---------------------------------------------------------------------------------


class ResourceCache:
    """A list+watch mirror of one kind of object, keyed by uid."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        on_event: Callable[[str, Obj], None],
        *,
        kind: str = "",
        api_version: str = "",
        watch_timeout: int = 300,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name, self._list, self._on_event = name, list_fn, on_event
        self.kind, self.api_version = kind, api_version
        self.items: dict[str, Obj] = {}
        self.resource_version: str | None = None
        self.relists = self.reconnects = 0
        self.synced = threading.Event()
        # False from a failed list or watch until the next one connects: the mirror may be stale.
        self.connected = False
        self._timeout, self._max_backoff, self._sleep = watch_timeout, max_backoff, sleep

    def relist(self) -> None:
        """A fresh list, page by page (a cluster-wide list of 10,000 pods in one answer is what
        API servers throttle); a page whose snapshot expired starts the list again."""
        while True:
            try:
                items, version = self._list_pages()
                break
            except ApiException as exc:
                if exc.status != 410:
                    raise
        # A list's items carry no kind or apiVersion (only watch events and GETs do): this cache
        # knows what it lists and says so on each item, as the rest of burst reads them.
        type_meta = {"kind": self.kind, "apiVersion": self.api_version} if self.kind else {}
        fresh = {meta_of(o)["uid"]: trimmed({**o, **type_meta}) for o in items}
        for uid in [u for u in self.items if u not in fresh]:
            self._on_event("DELETED", self.items.pop(uid))
        for uid, obj in fresh.items():
            self._on_event("MODIFIED" if uid in self.items else "ADDED", obj)
            self.items[uid] = obj
        self.resource_version = version
        self.relists += 1
        self.connected = True
        self.synced.set()

    def _list_pages(self) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            page = {"limit": PAGE, **({"_continue": token} if token else {})}
            data = json.loads(self._list(_preload_content=False, **page).data)
            items += data.get("items") or []
            token = meta_of(data).get("continue")
            if not token:
                return items, str(meta_of(data).get("resourceVersion") or "")

    def watch_once(self, stop: threading.Event) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        response = self._list(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout,
            _preload_content=False,
            _request_timeout=watch_timeout(self._timeout),
        )
        self.connected = True
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
                    meta_of(obj).get("resourceVersion") or self.resource_version
                )
                if event["type"] == "BOOKMARK":
                    continue
                uid = str(meta_of(obj).get("uid"))
                obj = trimmed(obj)
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
                self.connected = False
                self.reconnects += 1
                log.warning(
                    "watch %s: %s; reconnecting in %.1f s",
                    self.name,
                    exc.__class__.__name__,
                    backoff,
                )
                self._sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)


def onprem_caches(
    api_client: Any,
    on: Mapping[str, Callable[[str, Obj], None]],
    *,
    sleep: Callable[[float], None] = time.sleep,
    watch_timeout: int = 300,
) -> list[ResourceCache]:
    """What burst watches on-prem, in this order: Jobs, PyTorchJobs, Pods, Nodes, Namespaces,
    ResourceQuotas, and the FailedCreate Events of controllers; `on` names the handler of each
    group (workload, pod, other, refusal)."""
    from kubernetes import client

    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)

    def pytorchjobs(**kw: Any) -> Any:
        return custom.list_cluster_custom_object("kubeflow.org", "v1", "pytorchjobs", **kw)

    def failed_creates(**kw: Any) -> Any:
        return core.list_event_for_all_namespaces(field_selector="reason=FailedCreate", **kw)

    made = (
        ("jobs", batch.list_job_for_all_namespaces, "workload", "Job", "batch/v1"),
        ("pytorchjobs", pytorchjobs, "workload", "PyTorchJob", "kubeflow.org/v1"),
        ("pods", core.list_pod_for_all_namespaces, "pod", "Pod", "v1"),
        ("nodes", core.list_node, "other", "Node", "v1"),
        ("namespaces", core.list_namespace, "other", "Namespace", "v1"),
        (
            "resourcequotas",
            core.list_resource_quota_for_all_namespaces,
            "other",
            "ResourceQuota",
            "v1",
        ),
        ("failedcreate-events", failed_creates, "refusal", "Event", "v1"),
    )
    return [
        ResourceCache(
            name,
            fn,
            on[group],
            kind=kind,
            api_version=version,
            sleep=sleep,
            watch_timeout=watch_timeout,
        )
        for name, fn, group, kind, version in made
    ]
