"""Log lines are JSON objects off a terminal, with the pass and what the call names."""

import json
import logging

import pytest

from burst.service import logs


def test_json_lines_carry_the_pass_and_the_named_fields(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(logging.INFO, json_lines=True)
    try:
        token = logs.PASS.set(7)
        logging.getLogger("burst.test").warning(
            "pool %s failed", "p-1", extra={"pool": "p-1", "reason": "stockout"}
        )
        logs.PASS.reset(token)
        logging.getLogger("burst.test").info("between passes")
        logging.getLogger("urllib3.connectionpool").info("a request")  # the client's chatter
        first, second = (json.loads(x) for x in capsys.readouterr().err.strip().splitlines())
        assert first["message"] == "pool p-1 failed" and first["level"] == "WARNING"
        assert (first["logger"], first["pass"], first["pool"], first["reason"]) == (
            "burst.test",
            7,
            "p-1",
            "stockout",
        )
        assert "time" in first and "pass" not in second
    finally:
        logging.getLogger().handlers.clear()
