"""API errors of the sandbox API server, rendered as Kubernetes `Status` objects."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def not_found(kind_plural: str, name: str, group: str = "") -> ApiError:
    qualified = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        404,
        "NotFound",
        f'{qualified} "{name}" not found',
        {"name": name, "group": group, "kind": kind_plural},
    )


def conflict(kind_plural: str, name: str, why: str, group: str = "") -> ApiError:
    qualified = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        {"name": name, "group": group, "kind": kind_plural},
    )


def already_exists(kind_plural: str, name: str, group: str = "") -> ApiError:
    qualified = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified} "{name}" already exists',
        {"name": name, "group": group, "kind": kind_plural},
    )
