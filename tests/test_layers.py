"""The layers of docs/architecture.md hold in the code: import-linter checks the contracts in
pyproject.toml (imports run downward; kube, cloud and money stand apart; the sandbox, the cloud
SDKs and the kubernetes client stay where they belong), and a wrong-way import planted in a copy of
the tree is caught and named."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("burst", "providers", "migrations")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the packages found first in `tree` (as the checkout's, or a copy)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
            "--config",
            str(tree / "pyproject.toml"),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), "NO_COLOR": "1", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        check=False,
    )


def copy_tree(to: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, to / package, ignore=shutil.ignore_patterns("data", "__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", to / "pyproject.toml")
    return to


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "named"),
    [
        # A flow step reaching up into the service.
        (
            "burst/decide/planner.py",
            "from burst.service import loop",
            "burst.decide.planner -> burst.service.loop",
        ),
        # Two flow steps that must stand apart.
        (
            "burst/kube/translate.py",
            "from burst.money import ledger",
            "burst.kube.translate -> burst.money.ledger",
        ),
        # A noun that would pull in a flow step.
        ("burst/model.py", "import burst.cloud.catalog", "burst.model -> burst.cloud.catalog"),
        # The sandbox used by the running service.
        ("burst/service/loop.py", "import burst.sandbox", "burst.service.loop -> burst.sandbox"),
        # A cloud SDK outside its provider.
        ("burst/cloud/provision.py", "import boto3", "burst.cloud.provision -> boto3"),
    ],
    ids=["upward", "sideways", "noun-upward", "sandbox", "sdk"],
)
def test_a_planted_wrong_way_import_is_named(
    tmp_path: Path, module: str, planted: str, named: str
) -> None:
    tree = copy_tree(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{planted}  # planted\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert named in result.stdout, result.stdout


def test_modules_and_classes_stay_readable_in_one_sitting() -> None:
    """No module over 500 lines and no class over 260: split along the flow's seams instead."""
    too_long = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            if source.count("\n") > 500:
                too_long.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.ClassDef) and (node.end_lineno or 0) - node.lineno > 260:
                    lines = (node.end_lineno or 0) - node.lineno
                    too_long.append(f"{path.relative_to(ROOT)}: class {node.name} {lines} lines")
    assert not too_long, "\n".join(too_long)
