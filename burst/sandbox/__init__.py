"""A local Kubernetes for burst: an API server the official client uses unchanged, plus a
simulated control plane (Job and PyTorchJob controllers, a GPU-aware scheduler, a kubelet that
runs pods on a Clock, garbage collection).

Used by `burst sandbox up`, by `burst demo` and by the tests; nothing else in burst imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from burst.clock import Clock, SystemClock
from burst.kube.nodes import gpu_node_manifest
from burst.model import GPU_PRODUCTS
from burst.sandbox.base import POD_FAILURE_BACKOFF
from burst.sandbox.controllers import ControlPlane
from burst.sandbox.crds import LATEST
from burst.sandbox.kueue import Kueue
from burst.sandbox.server import ApiServer
from burst.sandbox.store import Store


def gpu_node(
    name: str,
    product: str = GPU_PRODUCTS["V100"],
    gpus: int = 4,
    cpu: int = 32,
    memory_gib: int = 256,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A ready GPU node as the NVIDIA device plugin and GPU feature discovery describe one."""
    return gpu_node_manifest(
        name,
        product=product,
        gpus=gpus,
        cpu=cpu,
        memory_gib=memory_gib,
        labels=labels,
        taints=taints or [],
    )


class Sandbox:
    """An API server on 127.0.0.1 and its control plane, started and stopped together."""

    def __init__(
        self,
        *,
        port: int = 0,
        token: str | None = None,
        authenticate: Callable[[str], bool] | None = None,
        clock: Clock | None = None,
        # A watch cache window as small as a busy real one (410 Gone is routine) and bookmarks
        # about once a minute (apiserver pkg/storage/cacher: defaultBookmarkFrequency).
        history: int = 5_000,
        bookmark_every: float = 60.0,
        tick: float = 0.05,
        default_duration: float = 30.0,
        controllers: bool = True,
        training_operator: str = LATEST,
        kueue_quotas: dict[str, int] | None = None,
        pod_failure_backoff: tuple[float, float] = POD_FAILURE_BACKOFF,
    ) -> None:
        self.clock = clock or SystemClock()
        self.store = Store(self.clock, history=history, training_operator=training_operator)
        if kueue_quotas is not None:  # Kueue installed, with these ClusterQueues (GPUs each)
            self.store.kueue = Kueue(kueue_quotas)
        self.server = ApiServer(
            self.store,
            port=port,
            token=token,
            authenticate=authenticate,
            bookmark_every=bookmark_every,
        )
        self.control = (
            ControlPlane(
                self.store,
                self.clock,
                tick=tick,
                default_duration=default_duration,
                pod_failure_backoff=pod_failure_backoff,
            )
            if controllers
            else None
        )
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="sandbox-api", daemon=True
        )

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> Sandbox:
        self._thread.start()
        if self.control is not None:
            self.control.start()
        return self

    def stop(self) -> None:
        if self.control is not None:
            self.control.stop()
        self.server.stop()
        self._thread.join(timeout=5)

    def freeze(self) -> None:
        """Hang every request and watch, as an API server that stopped answering."""
        self.server.freeze()

    def thaw(self) -> None:
        self.server.thaw()

    def reset(self) -> None:
        """Back to an empty cluster (default namespaces only), for the next test."""
        if self.control is not None:
            self.control.reset()
        self.store.reset()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, path: Path, name: str = "burst-sandbox") -> Path:
        user: dict[str, Any] = {"token": self.server.token} if self.server.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": user}],
            "contexts": [
                {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
            ],
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path
