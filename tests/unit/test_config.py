"""Configuration documents: every shipped example loads, every broken one is reported precisely."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from burst.cloud import catalog
from burst.config import (
    ConfigError,
    SelectorRequirement,
    Vocabulary,
    WorkloadSelector,
    load,
    selectors_overlap,
)
from tests.conftest import ROOT

BROKEN = ROOT / "tests" / "fixtures" / "broken-config"
EXPECT = re.compile(r"# expect@(\d+) (\S*): (.*)$")


@pytest.fixture(scope="module")
def vocabulary() -> Vocabulary:
    shipped = catalog.shipped()
    return Vocabulary(shipped.regions(), shipped.accelerators())


def _examples() -> list[Path]:
    return sorted(p for p in (ROOT / "config").rglob("*.yaml"))


@pytest.mark.parametrize("path", _examples(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_in_config_loads(path: Path, vocabulary: Vocabulary) -> None:
    # Each file alone, and below all of config/ together (references between files resolve).
    load([path], vocabulary)


def test_example_folder_as_a_whole(vocabulary: Vocabulary) -> None:
    cfg = load([ROOT / "config"], vocabulary)
    assert cfg.service is not None
    spec = cfg.service.spec
    assert [t.name for t in spec.targets] == [
        "aws-eu-central-1",
        "gcp-europe-west4",
        "azure-eastus",
    ]
    assert spec.intervals.orphan_gc == timedelta(minutes=10)
    policy = cfg.policies["ml-training"].spec
    assert policy.placement.accelerators["V100"][:2] == ["V100", "V100-32GB"]
    assert policy.limits.max_hourly_price == Decimal("40.00")
    assert policy.trigger.deadline_safety_margin == timedelta(minutes=30)
    assert cfg.budgets["cms-ml-monthly"].spec.amount == Decimal("5000.00")


def test_a_cluster_queue_left_unsaid_is_kueues_default(vocabulary: Vocabulary) -> None:
    # Kueue's ClusterQueue defaults queueingStrategy to BestEffortFIFO
    # (apis/kueue/v1beta1/clusterqueue_types.go); the demo's ServiceConfig says nothing of it,
    # and the simulation example asks for StrictFIFO, which its documented figures are of.
    demo = load([ROOT / "burst" / "data" / "demo" / "config.yaml"], vocabulary)
    example = load([ROOT / "docs" / "examples" / "simulate"], vocabulary)
    assert demo.service is not None and example.service is not None
    assert demo.service.spec.on_prem.queueing == "BestEffortFIFO"
    assert example.service.spec.on_prem.queueing == "StrictFIFO"


def _expected_problems() -> set[str]:
    """The problems the fixtures announce: `# expect@COLUMN path: message start` on each bad line."""
    expected = set()
    for file in sorted(BROKEN.glob("*.yaml")):
        for number, line in enumerate(file.read_text().splitlines(), start=1):
            m = EXPECT.search(line)
            if m:
                column, path, message = m.groups()
                prefix = f"{file.relative_to(ROOT)}:{number}:{column}: "
                expected.add(prefix + (f"{path}: " if path else "") + message)
    return expected


def test_broken_documents_give_one_precise_line_per_problem(
    vocabulary: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError) as caught:
        load([BROKEN.relative_to(ROOT)], vocabulary)
    reported = [str(p) for p in caught.value.problems]
    expected = _expected_problems()
    assert len(expected) >= 15
    assert len(reported) == len(expected), "\n".join(reported)
    for want in expected:
        assert any(line.startswith(want) for line in reported), f"missing: {want}\n" + "\n".join(
            reported
        )


def test_no_secret_in_error_messages(vocabulary: Vocabulary) -> None:
    with pytest.raises(ConfigError) as caught:
        load([BROKEN / "provider.yaml"], vocabulary)
    assert "hunter2" not in str(caught.value)


def test_duplicate_key_and_duplicate_name(tmp_path: Path) -> None:
    doc = """\
apiVersion: burst.dev/v1
kind: Budget
metadata: {name: b}
spec:
  scope: {team: t}
  period: day
  amount: 1
  currency: USD
"""
    (tmp_path / "a.yaml").write_text(doc + "---\n" + doc)
    (tmp_path / "b.yaml").write_text(doc.replace("period: day", "period: day\n  period: week"))
    with pytest.raises(ConfigError) as caught:
        load([tmp_path])
    lines = [str(p) for p in caught.value.problems]
    assert any(":12:18: metadata.name: duplicate Budget 'b'" in line for line in lines), lines
    assert any(line.endswith("b.yaml:7:3: duplicate key 'period'") for line in lines), lines


def test_a_document_that_is_not_a_mapping(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"x.yaml:1:1: a document must be a mapping"):
        load([tmp_path / "x.yaml"])


def _sel(
    namespaces: list[str] | None = None,
    labels: dict[str, str] | None = None,
    *exprs: tuple[str, str, list[str]],
) -> WorkloadSelector:
    return WorkloadSelector(
        namespaces=namespaces or [],
        match_labels=labels or {},
        match_expressions=[
            SelectorRequirement(key=k, operator=op, values=v)  # type: ignore[arg-type]
            for k, op, v in exprs
        ],
    )


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        (_sel(), _sel(), True),
        (_sel(["a"]), _sel(["b"]), False),
        (_sel(["a", "b"]), _sel(["b"]), True),
        (_sel(None, {"team": "cms"}), _sel(None, {"team": "atlas"}), False),
        (_sel(None, {"team": "cms"}), _sel(None, {"gpu": "v100"}), True),
        (_sel(None, {}, ("team", "In", ["cms", "atlas"])), _sel(None, {"team": "atlas"}), True),
        (_sel(None, {}, ("team", "NotIn", ["cms"])), _sel(None, {"team": "cms"}), False),
        (
            _sel(None, {}, ("team", "Exists", [])),
            _sel(None, {}, ("team", "DoesNotExist", [])),
            False,
        ),
        (_sel(None, {}, ("x", "DoesNotExist", [])), _sel(None, {"y": "1"}), True),
    ],
    ids=[
        "both-claim-everything",
        "disjoint-namespaces",
        "shared-namespace",
        "label-conflict",
        "different-labels-can-both-hold",
        "in-set-contains-value",
        "notin-excludes-value",
        "exists-vs-doesnotexist",
        "unrelated-keys",
    ],
)
def test_selector_overlap(a: WorkloadSelector, b: WorkloadSelector, overlap: bool) -> None:
    assert selectors_overlap(a, b) is overlap
    assert selectors_overlap(b, a) is overlap


def test_from_cloud_needs_a_cloud_target_and_excludes_a_kubeconfig(tmp_path: Path) -> None:
    service = """apiVersion: burst.dev/v1
kind: ServiceConfig
metadata: {name: s}
spec:
  installationId: site
  targets:
    - name: sim-aws
      provider: sim
      region: eu-central-1
      sim: {cloud: aws, cluster: remote}
      kubernetes: {fromCloud: true}
    - name: aws
      provider: aws
      region: eu-central-1
      aws: {clusterName: c, nodeRoleArn: "arn:aws:iam::123456789012:role/n", subnetIds: [s-1]}
      kubernetes: {fromCloud: true, kubeconfig: /etc/k}
"""
    (tmp_path / "burst.yaml").write_text(service)
    with pytest.raises(ConfigError) as bad:
        load([tmp_path])
    text = str(bad.value)
    assert "kubernetes.fromCloud needs a cloud provider" in text
    assert "set one of inCluster, kubeconfig and fromCloud" in text


def test_an_eks_target_needs_the_node_role_and_subnets_eks_requires(tmp_path: Path) -> None:
    """CreateNodegroup requires nodeRole and subnets; without them every create failed in botocore
    before it was sent, and was retried for ever."""
    (tmp_path / "burst.yaml").write_text(
        """apiVersion: burst.dev/v1
kind: ServiceConfig
metadata: {name: s}
spec:
  installationId: site
  targets:
    - name: aws
      provider: aws
      region: eu-central-1
      aws: {clusterName: c, nodeRoleArn: nodes}
"""
    )
    with pytest.raises(ConfigError) as bad:
        load([tmp_path])
    lines = str(bad.value).splitlines()
    assert any(
        line.endswith("burst.yaml:10:12: spec.targets[0].aws.subnetIds: required field is missing")
        for line in lines
    ), lines
    assert any(
        "burst.yaml:10:42: spec.targets[0].aws.nodeRoleArn: 'nodes' is not an IAM role" in line
        for line in lines
    ), lines


def test_each_target_names_the_account_its_bills_come_from() -> None:
    """Ledger rows carry the account a bill line names: the AWS account of the node role (EKS
    needs the role in the cluster's account), the GCP project, the Azure subscription."""
    from burst.config.documents import TargetSpec

    def target(**block: object) -> TargetSpec:
        provider = next(iter(block))
        return TargetSpec.model_validate(
            {"name": "t", "provider": provider, "region": "r", **block}
        )

    aws = {
        "clusterName": "c",
        "nodeRoleArn": "arn:aws:iam::210987654321:role/n",
        "subnetIds": ["s"],
    }
    assert target(aws=aws).account == "210987654321"
    assert target(gcp={"project": "p-1", "location": "r", "cluster": "c"}).account == "p-1"
    azure = {"subscriptionId": "sub", "resourceGroup": "g", "cluster": "c"}
    assert target(azure=azure).account == "sub"
    assert target(sim={"cloud": "aws"}).account is None
