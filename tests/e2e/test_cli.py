"""The `burst` command as an admin runs it: real processes, real files, real databases."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, burst_cli

run = burst_cli


def test_help_does_not_load_cloud_sdks_or_the_kubernetes_client() -> None:
    probe = (
        "import sys, burst.cli\n"
        "try:\n    burst.cli.main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('kubernetes', 'boto3', 'botocore', 'google', 'azure', 'sqlalchemy', 'alembic')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "Usage" in out.stdout
    assert out.stdout.strip().endswith("[]")


def test_config_validate_accepts_the_examples() -> None:
    result = run("config", "validate", "config/")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: ")


def test_config_validate_reports_each_problem_on_its_own_line() -> None:
    result = run("config", "validate", "tests/fixtures/broken-config")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) >= 15
    for line in lines:
        assert re.match(r"^tests/fixtures/broken-config/[\w.-]+\.yaml:\d+:\d+: ", line), line
    assert "Traceback" not in result.stdout + result.stderr


def test_config_validate_of_a_missing_path() -> None:
    result = run("config", "validate", "no/such/dir")
    assert result.returncode == 1
    assert "no such file or folder: no/such/dir" in result.stderr


def test_catalog_json_is_filtered_and_cheapest_first() -> None:
    result = run(
        "catalog", "--accelerator", "A100", "--provider", "gcp", "--format", "json", "--limit", "0"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    offers = data["offers"]
    assert len(offers) == data["total"] > 10
    assert {(o["cloud"], o["accelerator"]) for o in offers} == {("gcp", "A100")}
    prices = [float(o["hourly"]) for o in offers]
    assert prices == sorted(prices)


def test_catalog_table_applies_config_overrides() -> None:
    result = run(
        "catalog",
        "-a",
        "T4",
        "-p",
        "aws",
        "--capacity",
        "on-demand",
        "-c",
        "config",
        "--limit",
        "3",
    )
    assert result.returncode == 0, result.stderr
    assert "g4dn.xlarge" in result.stdout
    assert "discount" in result.stdout  # config/burst.yaml gives AWS 5 % off
    assert "0.4997" in result.stdout  # 0.526 list price in us-east-1, less 5 %


def test_catalog_rejects_unknown_accelerator() -> None:
    result = run("catalog", "-a", "TPUv9")
    assert result.returncode == 1
    assert "unknown accelerator TPUv9" in result.stderr


def test_db_upgrade_then_check(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'burst.db'}"
    before = run("db", "check", "--url", url)
    assert before.returncode == 1 and "burst db upgrade" in before.stderr
    up = run("db", "upgrade", env={"BURST_DATABASE_URL": url})
    assert up.returncode == 0, up.stderr
    check = run("db", "check", "--url", url)
    assert check.returncode == 0 and "matches the tables" in check.stdout


def test_db_password_never_printed(tmp_path: Path) -> None:
    # Port 1 refuses at once: the error must name the database but not its password.
    result = run("db", "upgrade", "--url", "postgresql://burst:s3cret-pw@127.0.0.1:1/burst")
    assert result.returncode == 1
    assert "127.0.0.1:1/burst" in result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr


@pytest.mark.postgres
def test_db_upgrade_on_postgres_with_password_file(postgres_url: str, tmp_path: Path) -> None:
    # The ServiceConfig names the database; the (empty here: trust auth) password comes from a file.
    (tmp_path / "pw").write_text("not-used-with-trust-auth\n")
    (tmp_path / "burst.yaml").write_text(
        "apiVersion: burst.dev/v1\nkind: ServiceConfig\nmetadata: {name: burst}\n"
        f"spec:\n  installationId: t\n  database:\n    url: {postgres_url}\n"
        f"    passwordFile: {tmp_path / 'pw'}\n"
    )
    up = run("db", "upgrade", "-c", str(tmp_path / "burst.yaml"))
    assert up.returncode == 0, up.stderr
    assert "not-used" not in up.stdout + up.stderr
    assert run("db", "check", "-c", str(tmp_path / "burst.yaml")).returncode == 0
