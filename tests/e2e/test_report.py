"""`burst report` in every format over a ledger produced by the simulated cloud."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
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
    rows = list(csv.reader(io.StringIO(raw.decode(), newline="")))
    assert rows[0] == ["job", "spend (USD)", "GPU-hours", "overhead share", "idle share"]
    assert rows[-1][0] == "total"
    assert any(r[0] == "cms-ml/higgs-train" for r in rows)


def test_table_and_markdown(ledger_url: str) -> None:
    table = report(ledger_url, "--period", "2026-11")
    assert "cms-ml" in table and "budget cms-ml-monthly" in table
    md = report(ledger_url, "--period", "2026-11", "--format", "md")
    assert md.startswith("# burst spend 2026-11") and "| team |" in md and "| budget |" in md


def test_html_is_one_file_with_both_charts(ledger_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    report(ledger_url, "--period", "2026-11", "--format", "html", "--out", str(out))
    page = out.read_text()
    assert page.count("<svg") == 2 and 'class="bar"' in page and 'class="burn"' in page
    assert "<script" not in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )


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
    assert dom.count("<rect") >= 3 and "<polyline" in dom


def test_bad_period_is_a_clear_error(ledger_url: str) -> None:
    result = burst_cli("report", "--url", ledger_url, "--period", "November")
    assert result.returncode == 1 and "bad period 'November'" in result.stderr
