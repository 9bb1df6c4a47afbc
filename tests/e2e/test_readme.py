"""The README's test command is the one CI runs, word for word."""

import re

from tests.conftest import ROOT


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r'^TEST_COMMAND="(.*)"$', ci, re.MULTILINE)
    assert command is not None
    readme = (ROOT / "README.md").read_text()
    test_section = readme.split("## Test it", 1)[1].split("##", 1)[0]
    assert f"\n{command.group(1)}\n" in test_section
