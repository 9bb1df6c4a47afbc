"""The three patch formats of the Kubernetes API: JSON merge patch (RFC 7386), JSON patch
(RFC 6902) and strategic merge patch (lists merged by their key, as built-in types declare)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from burst.sandbox.errors import ApiError

# Lists that strategic merge patch merges by a key (patchMergeKey of the built-in types), by
# field name; a list not named here is replaced whole.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "taints": "key",
}
# Primitive lists that strategic merge patch unions instead of replacing.
MERGE_SETS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise ApiError(400, "BadRequest", "a JSON patch is a list of operations")
    try:
        return jsonpatch.apply_patch(target, operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise ApiError(422, "Invalid", f"the JSON patch could not be applied: {exc}") from None


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return None
        result = dict(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
                continue  # ordering and retain directives: no effect on the stored object here
            if key.startswith("$deleteFromPrimitiveList/"):
                name = key.split("/", 1)[1]
                result[name] = [v for v in result.get(name, []) if v not in value]
                continue
            if value is None:
                result.pop(key, None)
                continue
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        return result
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field)
        if key and isinstance(target, list):
            return _merge_list(target, patch, key)
        if field in MERGE_SETS and isinstance(target, list):
            return target + [v for v in patch if v not in target]
        return copy.deepcopy(patch)
    return copy.deepcopy(patch)


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(422, "Invalid", f"list items must carry the merge key {key!r}")
        index = next(
            (i for i, t in enumerate(result) if isinstance(t, dict) and t.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result
