"""What a workload asks for, read from its pod templates: GPUs per pod (whole GPUs, MIG slices or
shared GPUs), the GPU product its node selector or affinity names (as a catalog accelerator), CPU
and memory, and how many pods run at once. Pure; the observer and `burst explain` use it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from burst.kube.quantity import quantity
from burst.model import GPU_PRODUCT_LABEL, GPU_PRODUCTS

GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"


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
    if gpus <= 0:
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


def request_problems(obj: Mapping[str, Any]) -> list[str]:
    """GPU requests no API server would accept (a negative, fractional or unreadable count), by
    path: `burst explain` reads manifests no server has seen."""
    problems = []
    spec = obj.get("spec") or {}
    templates = (
        [(f"spec.pytorchReplicaSpecs.{k}.template", (r or {}).get("template") or {})
         for k, r in sorted((spec.get("pytorchReplicaSpecs") or {}).items())]
        if obj.get("kind") == "PyTorchJob"
        else [("spec.template", spec.get("template") or {})]
    )  # fmt: skip
    for where, template in templates:
        for i, c in enumerate((template.get("spec") or {}).get("containers") or []):
            resources = c.get("resources") or {}
            for part in ("limits", "requests"):
                for name, value in (resources.get(part) or {}).items():
                    if not (name in (GPU, SHARED_GPU) or name.startswith(MIG_PREFIX)):
                        continue
                    try:
                        count = quantity(value)
                    except ValueError:
                        count = -1.0
                    if count < 0 or count != int(count):
                        problems.append(
                            f"{where}.spec.containers[{i}].resources.{part}[{name}]: "
                            f"{value!r} is not a whole number of GPUs"
                        )
    return problems
