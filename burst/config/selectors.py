"""Which workloads a BurstPolicy claims: Kubernetes label-selector semantics over a namespace and
labels, and whether two selectors could ever claim the same workload (config checks forbid it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from burst.config.documents import WorkloadSelector


def _labels_satisfiable(reqs: Iterable[tuple[str, str, frozenset[str]]]) -> bool:
    """Whether some label set satisfies every (key, operator, values) requirement at once."""
    by_key: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for key, op, values in reqs:
        by_key.setdefault(key, []).append((op, values))
    for constraints in by_key.values():
        must_exist = any(op in ("In", "Exists") for op, _ in constraints)
        must_not = any(op == "DoesNotExist" for op, _ in constraints)
        if must_exist and must_not:
            return False
        allowed: frozenset[str] | None = None
        for op, values in constraints:
            if op == "In":
                allowed = values if allowed is None else allowed & values
        if allowed is not None:
            banned = frozenset().union(*(v for op, v in constraints if op == "NotIn"))
            if not allowed - banned:
                return False
    return True


def _requirements(s: WorkloadSelector) -> list[tuple[str, str, frozenset[str]]]:
    reqs = [(k, "In", frozenset([v])) for k, v in s.match_labels.items()]
    reqs += [(r.key, r.operator, frozenset(r.values)) for r in s.match_expressions]
    return reqs


def selector_matches(s: WorkloadSelector, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether a workload in `namespace` with `labels` is claimed by the selector."""
    if s.namespaces and namespace not in s.namespaces:
        return False
    if s.match_labels and any(labels.get(k) != v for k, v in s.match_labels.items()):
        return False
    for r in s.match_expressions:
        value = labels.get(r.key)
        ok = {
            "In": value is not None and value in r.values,
            "NotIn": value is None or value not in r.values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[r.operator]
        if not ok:
            return False
    return True


def selectors_overlap(a: WorkloadSelector, b: WorkloadSelector) -> bool:
    """True when one workload could be claimed by both selectors."""
    if a.namespaces and b.namespaces and not set(a.namespaces) & set(b.namespaces):
        return False
    return _labels_satisfiable(_requirements(a) + _requirements(b))
