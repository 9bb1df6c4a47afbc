"""`burst report` in every format over a ledger produced by the simulated cloud."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import burst_cli
from tests.ledger_scenario import build_ledger


@pytest.fixture(scope="module")
def ledger_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'burst.db'}"
    build_ledger(url)
    return url


def report(url: str, *args: str) -> str:
    result = burst_cli("report", "--url", url, "-c", "config", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_json_totals_match_the_rows_and_the_ledger(ledger_url: str) -> None:
    data = json.loads(report(ledger_url, "--period", "2026-11", "--by", "team", "--format", "json"))
    assert [r["key"] for r in data["rows"]] == ["atlas-ml", "cms-ml", "ml-platform"]
    assert sum(float(r["spend"]) for r in data["rows"]) == pytest.approx(
        float(data["total"]), abs=1e-6
    )
    platform = next(r for r in data["rows"] if r["key"] == "ml-platform")
    assert platform["overhead_share"] + platform["idle_share"] == pytest.approx(
        1.0
    )  # what bursting itself cost
    budgets = {b["name"]: b for b in data["budgets"]}
    assert budgets["cms-ml-monthly"]["currency"] == "CHF"
    assert float(budgets["cms-ml-monthly"]["used"]) > 0


def test_by_provider_and_day_and_a_week(ledger_url: str) -> None:
    by_provider = json.loads(
        report(ledger_url, "--period", "2026-11", "--by", "provider", "--format", "json")
    )
    assert [r["key"] for r in by_provider["rows"]] == ["aws", "azure", "gcp"]
    week = json.loads(report(ledger_url, "--period", "2026-W45", "--by", "day", "--format", "json"))
    assert all(r["key"].startswith("2026-11-0") for r in week["rows"])
    in_chf = json.loads(
        report(ledger_url, "--period", "2026-11", "--currency", "CHF", "--format", "json")
    )
    assert float(in_chf["total"]) == pytest.approx(float(by_provider["total"]) * 0.80, rel=1e-6)


def test_csv_opens_cleanly(ledger_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report.csv"
    report(
        ledger_url,
        "--period",
        "2026-11-01..2026-11-30",
        "--by",
        "job",
        "--format",
        "csv",
        "--out",
        str(out),
    )
    raw = out.read_bytes()
    assert b"\r\n" in raw  # RFC 4180 line ends, as spreadsheets expect
    rows = list(csv.DictReader(io.StringIO(raw.decode(), newline="")))
    assert list(rows[0]) == [
        "job",
        "currency",
        "spend",
        "gpu_hours",
        "overhead_share",
        "idle_share",
    ]
    # Machine-readable: plain numbers, no total row among the data, rows that add to the total.
    assert {r["currency"] for r in rows} == {"USD"}
    assert all(Decimal(r["spend"]) >= 0 and 0 <= float(r["idle_share"]) <= 1 for r in rows)
    assert not any(r["job"] == "total" or "%" in r["idle_share"] for r in rows)
    total = json.loads(
        report(ledger_url, "--period", "2026-11-01..2026-11-30", "--by", "job", "-f", "json")
    )["total"]
    assert sum(Decimal(r["spend"]) for r in rows) == Decimal(total)
    # A job by its namespace and name, as users know it (uids before).
    assert any(r["job"] == "cms-ml/higgs-train" for r in rows), [r["job"] for r in rows]


def test_table_and_markdown(ledger_url: str) -> None:
    table = report(ledger_url, "--period", "2026-11")
    assert "cms-ml" in table and "budget cms-ml-monthly" in table
    md = report(ledger_url, "--period", "2026-11", "--format", "md")
    assert md.startswith("# burst spend 2026-11") and "| team |" in md and "| budget |" in md


def test_html_is_one_file_with_both_charts(ledger_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    report(ledger_url, "--period", "2026-11", "--format", "html", "--out", str(out))
    page = out.read_text()
    assert page.count("<svg") == 2  # daily spend, budgets
    assert "Daily spend by provider" in page and "Budgets: what is left" in page
    assert ">USD<" in page and ">day<" in page  # axes say what they measure
    assert "11-02" in page and "11-03" in page  # every day on the axis
    assert "cms-ml-monthly (CHF)" in page and "Overhead is what a pool cost" in page
    assert "<script" not in page and 'href="http' not in page and 'src="http' not in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_the_html_renders_its_charts_in_headless_chromium(ledger_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    report(ledger_url, "--period", "2026-11", "--format", "html", "--out", str(out))
    dom = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            out.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert dom.count("<svg") >= 2 and "<path" in dom


def test_bad_period_is_a_clear_error(ledger_url: str) -> None:
    result = burst_cli("report", "--url", ledger_url, "--period", "November")
    assert result.returncode == 1 and "bad period 'November'" in result.stderr
