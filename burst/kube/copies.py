"""The copies burst made in a remote cluster, mirrored by a watch (as Kueue's MultiKueue keeps
watches on its worker clusters), so that following 10,000 dispatched workloads does not list and
decode 10,000 objects every pass.

One ResourceCache per kind in use (Jobs; PyTorchJobs once one is dispatched there), selected by
the installation's label. `snapshot()` answers only while the watch is connected and has listed
once; otherwise the caller lists as before, and a cluster that cannot be listed counts against its
grace. The mirror may lag the cluster by an event: a copy it lacks is read before it is called
missing (see Syncer.sync).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from burst.kube.replicate import KubeObjects
from burst.kube.translate import ORIGIN_INSTALLATION
from burst.kube.watch import Obj, ResourceCache, meta_of

CopyKey = tuple[str, str, str]  # a remote copy's kind, namespace and name


class RemoteCopies:
    def __init__(self, remote: KubeObjects, installation: str, watch_timeout: int = 300) -> None:
        self.remote, self.selector = remote, f"{ORIGIN_INSTALLATION}={installation}"
        self.watch_timeout = watch_timeout
        self.caches: dict[str, ResourceCache] = {}
        self._stop = threading.Event()

    def snapshot(self, kinds: Iterable[str]) -> dict[CopyKey, Obj] | None:
        """The mirrored copies of these kinds, or None while a mirror is not connected and
        listed (it is started on first use)."""
        out: dict[CopyKey, Obj] = {}
        ready = True
        for kind in sorted(set(kinds)):
            cache = self.caches.get(kind) or self._start(kind)
            if not (cache.synced.is_set() and cache.connected):
                ready = False
                continue
            for obj in list(cache.items.values()):
                meta = meta_of(obj)
                out[(kind, meta.get("namespace", ""), meta.get("name", ""))] = obj
        return out if ready else None

    def stop(self) -> None:
        self._stop.set()

    def _start(self, kind: str) -> ResourceCache:
        selector = self.selector

        def jobs(**kw: Any) -> Any:
            return self.remote.batch.list_job_for_all_namespaces(label_selector=selector, **kw)

        def pytorchjobs(**kw: Any) -> Any:
            return self.remote.custom.list_cluster_custom_object(
                "kubeflow.org", "v1", "pytorchjobs", label_selector=selector, **kw
            )

        cache = ResourceCache(
            f"copies-{kind.lower()}",
            jobs if kind == "Job" else pytorchjobs,
            lambda _type, _obj: None,
            kind=kind,
            api_version="batch/v1" if kind == "Job" else "kubeflow.org/v1",
            watch_timeout=self.watch_timeout,
        )
        self.caches[kind] = cache
        threading.Thread(target=cache.run, args=(self._stop,), daemon=True).start()
        return cache
