"""ruff and mypy over the project, so that the test command also keeps the code clean."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "burst/migrations"], ["mypy"]],
    ids=["ruff", "ruff-format-migrations", "mypy"],
)
def test_static_checks(command: list[str]) -> None:
    tool = shutil.which(command[0], path=str(ROOT.parent)) or shutil.which(command[0])
    if tool is None:
        tool_in_env = [sys.executable, "-m", command[0]]
        command = [*tool_in_env, *command[1:]]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
