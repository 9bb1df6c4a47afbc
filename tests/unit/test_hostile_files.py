"""Hostile input files are refused fast, with one line naming the file, and cost no memory: a YAML
alias bomb (`burst config validate` grew past 1 GB on one), a file over the size kube-apiserver
accepts, a burst document under an apiVersion this burst does not read (it was skipped without a
word, so a typo dropped a policy), times no calendar holds, negative GPUs."""

from __future__ import annotations

import json
import resource
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from burst.config import ConfigError, load
from burst.config.yamlsource import MAX_BYTES
from burst.decide.snapshot import SnapshotError, load_snapshot
from burst.kube.annotations import BurstAnnotations, read_annotations
from burst.money import bills
from burst.money.bills import BillError
from tests.conftest import ROOT, burst_cli


def alias_bomb(levels: int = 9) -> str:
    """The 'billion laughs': each level lists the one before nine times (9^9 values)."""
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "apiVersion: burst.dev/v1\nkind: Budget\nmetadata: {name: b}\nspec:\n  " + (
        "\n  ".join(lines)
    )


def test_an_alias_bomb_is_refused_at_once_in_a_config(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(alias_bomb())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    with pytest.raises(ConfigError) as refused:
        load([tmp_path])
    assert time.process_time() - started < 5  # 9^9 values would take hours
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB
    (problem,) = refused.value.problems
    assert str(problem).startswith(f"{tmp_path / 'bomb.yaml'}:")
    assert "expands to over 100,000 values" in str(problem)


def test_an_alias_bomb_is_refused_in_a_manifest_burst_explains(tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(alias_bomb().replace("kind: Budget", "kind: Job"))
    result = burst_cli("explain", str(manifest), timeout=60)
    assert result.returncode == 1 and "expands to over 100,000 values" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_file_over_the_limit_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("w") as f:  # a valid document, padded with comments past the limit
        f.write("apiVersion: burst.dev/v1\nkind: Budget\nmetadata: {name: b}\n")
        line = "# " + "x" * 1022 + "\n"
        for _ in range(MAX_BYTES // len(line) + 1):
            f.write(line)
    started = time.process_time()
    with pytest.raises(ConfigError) as refused:
        load([tmp_path])
    assert time.process_time() - started < 1
    (problem,) = refused.value.problems
    assert str(problem) == f"{big}:1:1: 3.0 MiB is over the 3 MiB burst reads"


@pytest.mark.parametrize(
    ("version", "kind"),
    [("burst.dev/v2", "BurstPolicy"), ("burst.io/v1", "Budget"), ("v1", "BurstPolicy")],
)
def test_a_burst_document_under_another_api_version_is_an_error(
    tmp_path: Path, version: str, kind: str
) -> None:
    (tmp_path / "p.yaml").write_text(
        f"apiVersion: {version}\nkind: {kind}\nmetadata: {{name: p}}\n"
    )
    with pytest.raises(ConfigError) as refused:
        load([tmp_path])
    (problem,) = refused.value.problems
    assert str(problem) == (
        f"{tmp_path / 'p.yaml'}:1:13: apiVersion: unknown apiVersion {version!r}: "
        "this burst reads burst.dev/v1"
    )


def test_kubernetes_manifests_beside_the_config_are_skipped_but_a_folder_of_only_them_is_an_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "rbac.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n"
    )
    result = burst_cli("config", "validate", str(tmp_path))
    assert result.returncode == 1, result.stdout
    assert "no burst document (apiVersion: burst.dev/v1) in 1 file(s)" in result.stderr


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("deadline", "0001-01-01T00:00:00Z", "before the job was created"),
        ("deadline", "9999-12-31T23:59:59Z", "more than 3650 days away"),
        ("deadline", "999999999h", "more than 3650 days away"),
        ("expected-runtime", "999999999h", "more than 3650 days away"),
    ],
)
def test_times_out_of_any_calendar_are_reported_on_the_job(key: str, value: str, why: str) -> None:
    """A year-1 deadline or a runtime of a hundred millennia made the pass overflow datetime."""
    created = datetime(2026, 12, 1, tzinfo=UTC)
    found, problems = read_annotations({f"burst.dev/{key}": value}, "burst.dev/", created, "USD")
    assert found == BurstAnnotations()
    (problem,) = problems
    assert problem.startswith(f"burst.dev/{key}={value!r} is ignored: ") and why in problem


def test_a_snapshot_out_of_range_is_refused_naming_each_field() -> None:
    """Negative GPUs and capacity were planned with; a year-1 deadline overflowed datetime."""
    data = json.loads((ROOT / "docs" / "snapshot.example.json").read_text())
    data["workloads"][0]["deadline"] = "0001-01-01T00:00:00Z"
    data["workloads"][1]["gpus_per_pod"] = -4
    data["workloads"][2]["expected_runtime"] = "P99999999D"
    data["onprem"]["capacity"]["V100"] = -8
    data["onprem"]["nodes"][2]["gpus"] = -4
    with pytest.raises(SnapshotError) as refused:
        load_snapshot(json.dumps(data))
    assert str(refused.value).splitlines() == [
        "onprem.capacity.V100: -8 GPUs cannot be negative",
        "onprem.nodes.2.gpus: -4 GPUs cannot be negative",
        "onprem.nodes: 0 T4 GPUs on the nodes, but onprem.capacity says 8",
        "onprem.nodes: 16 V100 GPUs on the nodes, but onprem.capacity says -8",
        "workloads.0.deadline: 0001-01-01T00:00:00+00:00 is outside 1970-2200",
        "workloads.1: 4 pod(s) of -4 GPU(s): pods >= 1, GPUs >= 0",
        "workloads.2.expected_runtime: 99999999 days, 0:00:00 is outside 0 to 3650 days",
    ]


@pytest.mark.parametrize("amount", ["1e30", "-99999999999999999999", "NaN", "Infinity"])
def test_a_bill_amount_no_line_can_hold_is_refused(amount: str) -> None:
    """An amount past the ledger's 64-bit integers was posted (or raised from the database)."""
    bill = (
        "BilledCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,Tags\n"
        f"{amount},USD,2026-11-02T08:00:00Z,2026-11-02T09:00:00Z,Usage,{{}}\n"
    )
    with pytest.raises(BillError, match=r"is not an amount a bill line can hold"):
        bills.parse(bill, {})
