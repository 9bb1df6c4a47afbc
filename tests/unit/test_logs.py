"""Log lines are JSON objects off a terminal."""

import json
import logging

import pytest

from burst.service import logs


def test_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(logging.INFO, json_lines=True)
    logging.getLogger("burst.test").warning("pool %s is ready", "p-1")
    line = json.loads(capsys.readouterr().err.strip())
    assert (
        line["message"] == "pool p-1 is ready"
        and line["level"] == "warning"
        and line["logger"] == "burst.test"
    )
    logging.getLogger().handlers.clear()
