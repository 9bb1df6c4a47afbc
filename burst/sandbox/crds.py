"""The custom resources' structural schemas: the API server prunes fields a structural CRD schema
does not declare, silently (apiextensions-apiserver; the Kubeflow PyTorchJob CRD has no
x-kubernetes-preserve-unknown-fields anywhere: kubeflow/training-operator
manifests/base/crds/kubeflow.org_pytorchjobs.yaml, v1.5.0 to v1.9.0).

What the PyTorchJob schema declares depends on the training operator installed, which the sandbox
takes as a setting: `spec.runPolicy.suspend` exists from v1.7.0 (kubeflow/training-operator PR
#1859) and `spec.runPolicy.managedBy` from v1.9.0 (PR #2203); on an older operator those fields
are dropped and the job runs as if they were never written.
"""

from __future__ import annotations

from typing import Any

OPERATORS = ("v1.6", "v1.7", "v1.8", "v1.9")
LATEST = OPERATORS[-1]
_SPEC = frozenset({"pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"})
_RUN_POLICY = frozenset(
    {
        "activeDeadlineSeconds",
        "backoffLimit",
        "cleanPodPolicy",
        "schedulingPolicy",
        "ttlSecondsAfterFinished",
    }
)
_ADDED = {"suspend": "v1.7", "managedBy": "v1.9"}


def run_policy_fields(operator: str) -> frozenset[str]:
    if operator not in OPERATORS:
        raise ValueError(f"unknown training operator {operator!r}: one of {', '.join(OPERATORS)}")
    added = {
        f for f, since in _ADDED.items() if OPERATORS.index(operator) >= OPERATORS.index(since)
    }
    return _RUN_POLICY | added


def prune_pytorchjob(obj: dict[str, Any], operator: str) -> None:
    """Drop what the operator's PyTorchJob schema does not declare under spec and runPolicy."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for key in [k for k in spec if k not in _SPEC]:
        del spec[key]
    run_policy = spec.get("runPolicy")
    if isinstance(run_policy, dict):
        allowed = run_policy_fields(operator)
        for key in [k for k in run_policy if k not in allowed]:
            del run_policy[key]
