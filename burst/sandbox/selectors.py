"""Label and field selectors as the Kubernetes API reads them from `?labelSelector=` / `?fieldSelector=`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from burst.sandbox.errors import ApiError

Matcher = Callable[[Mapping[str, Any]], bool]

_SET = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def _label_test(key: str, op: str, values: frozenset[str]) -> Callable[[Mapping[str, str]], bool]:
    def test(labels: Mapping[str, str]) -> bool:
        value = labels.get(key)
        if op in ("in", "=", "=="):
            return value in values
        if op in ("notin", "!="):
            return value not in values
        return (value is not None) == (op == "exists")

    return test


def label_matcher(selector: str | None) -> Matcher:
    if not selector:
        return lambda labels: True
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split(selector):
        if m := _SET.match(term):
            key, op, raw = m.groups()
            values = frozenset(v.strip() for v in raw.split(",") if v.strip())
            tests.append(_label_test(key, op, values))
        elif m := _EQ.match(term):
            key, op, value = m.groups()
            tests.append(_label_test(key, op, frozenset([value])))
        elif m := _EXISTS.match(term):
            negate, key = m.groups()
            tests.append(_label_test(key, "absent" if negate else "exists", frozenset()))
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term.strip()!r}")
    return lambda labels: all(t(labels) for t in tests)


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_test(path: str, op: str, value: str) -> Matcher:
    def test(obj: Mapping[str, Any]) -> bool:
        return (_field(obj, path) == value) == (op != "!=")

    return test


def field_matcher(selector: str | None) -> Matcher:
    """Field selectors on any dotted path (the real server allows a few per kind; we allow all)."""
    if not selector:
        return lambda obj: True
    tests = []
    for term in _split(selector):
        m = _EQ.match(term.replace(" ", ""))
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term.strip()!r}")
        path, op, value = m.groups()
        tests.append(_field_test(path, op, value))
    return lambda obj: all(t(obj) for t in tests)
