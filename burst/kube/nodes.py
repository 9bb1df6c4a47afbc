"""The Kubernetes Node a GPU machine registers as: labels, taints, GPU capacity, readiness.

Data only. The sandbox (`burst sandbox up`, tests) and the simulated cloud (providers/sim.py)
both register nodes of this shape, as a kubelet with the NVIDIA device plugin and GPU feature
discovery would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from burst.model import GPU_PRODUCT_LABEL


def gpu_node_manifest(
    name: str,
    *,
    product: str,
    gpus: int,
    cpu: int = 32,
    memory_gib: int = 256,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    runtime: str = "sandbox",
) -> dict[str, Any]:
    resources = {
        "cpu": str(cpu),
        "memory": f"{memory_gib}Gi",
        "nvidia.com/gpu": str(gpus),
        "pods": "110",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                GPU_PRODUCT_LABEL: product,
                "nvidia.com/gpu.count": str(gpus),
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": f"{runtime} kubelet is posting ready status",
                }
            ],
            "nodeInfo": {
                "kubeletVersion": f"v1.31.0-{runtime}",
                "kubeProxyVersion": "v1.31.0",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": runtime,
                "kernelVersion": "6.1.0",
                "containerRuntimeVersion": f"{runtime}://1.0",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
            },
        },
    }
