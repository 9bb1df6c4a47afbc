"""The API fuzzed from its own OpenAPI document (schemathesis): every operation, with generated
paths, queries and headers, answers within its documented responses, never a server error,
and nothing is served without the token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.integration.test_api import TOKEN, ledger_app


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with ledger_app(tmp_path_factory.mktemp("fuzz")) as made:
        yield made


def operations(app: Any) -> list[Any]:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    return [result.ok() for result in schema.get_all_operations()]


def fuzz(app: Any, check: Any, examples: int) -> int:
    """Run `check` on generated cases of every operation; how many operations were run."""
    done = 0
    for operation in operations(app):

        @given(operation.as_strategy())
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
        def each(case: Any) -> None:
            check(case)

        each()
        done += 1
    return done


def test_every_operation_keeps_to_its_document(app: Any) -> None:
    def check(case: Any) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})

    assert fuzz(app, check, 25) >= 8


def test_nothing_but_the_probes_is_served_without_the_token(app: Any) -> None:
    def check(case: Any) -> None:
        response = case.call()
        if case.path in ("/healthz", "/readyz"):
            assert response.status_code == 200
        else:
            assert response.status_code == 401, (case.path, response.status_code)

    assert fuzz(app, check, 10) >= 8
