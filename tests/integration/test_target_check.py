"""`burst target check`: the read-only checks against each cloud's stand-in (moto with Service
Quotas answered as the service does, the GKE and ARM fakes, the simulated cloud)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from burst.cli.main import app
from burst.cloud import catalog
from burst.cloud.check import check_target
from tests.conftest import ROOT
from tests.fakes.arm import ArmFake
from tests.fakes.gke import GkeFake
from tests.fakes.proxy import Proxy, Rule
from tests.integration import test_azure_provider as azure_tests
from tests.integration import test_gcp_provider as gcp_tests
from tests.integration.test_aws_provider import REGION, eks, provider

__all__ = ["eks"]  # the moto EKS cluster fixture, shared

SHIPPED = list(catalog.shipped())


def _quota(code: str, value: float) -> Rule:
    """GetServiceQuota as Service Quotas answers it (JSON 1.1; moto does not know EC2's quotas)."""
    body = {
        "Quota": {
            "ServiceCode": "ec2",
            "QuotaCode": code,
            "QuotaName": "scripted",
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
        }
    }
    return Rule(
        lambda m, p, b: m == "POST" and code.encode() in b,
        status=200,
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/x-amz-json-1.1"},
        times=1,
    )


@pytest.fixture
def quotas(eks: Any, moto_url: str) -> Iterator[Proxy]:
    proxy = Proxy(moto_url)
    yield proxy
    proxy.stop()


def test_aws_reads_the_cluster_the_pools_and_each_gpu_quota(quotas: Proxy) -> None:
    quotas.add(_quota("L-DB2E81BA", 0.0))  # G and VT on demand: none granted (new accounts)
    quotas.add(_quota("L-417A185B", 96.0))  # P on demand
    offers = [o for o in SHIPPED if o.region == REGION and o.capacity == "on-demand"]
    offers = [o for o in offers if o.accelerator in ("T4", "V100")]
    found = check_target("aws-euc1", provider(quotas.url), "site-a", offers)
    lines = [(f.what, f.ok, f.detail) for f in found]
    assert lines[0][:2] == ("cluster", True) and "ACTIVE" in lines[0][2]
    assert lines[1] == ("node pools", True, "0 of burst's listed")
    assert (
        "GPU quota",
        False,
        "Running On-Demand G and VT instances (L-DB2E81BA): 0 vCPUs; g4dn.xlarge needs 4",
    ) in lines
    assert (
        "GPU quota",
        True,
        "Running On-Demand P instances (L-417A185B): 96 vCPUs; p3.2xlarge needs 8",
    ) in lines


def test_a_cluster_that_is_not_there_stops_the_check(quotas: Proxy) -> None:
    aws = provider(quotas.url)
    aws.cluster = "no-such-cluster"
    found = check_target("aws-euc1", aws, "site-a", SHIPPED)
    assert [(f.what, f.ok) for f in found] == [("cluster", False)]
    assert "No cluster found" in found[0].detail or "not found" in found[0].detail.lower()


def test_gke_and_aks_clusters_are_read(tmp_path: Path) -> None:
    gke = GkeFake()
    arm = ArmFake(tmp_path)
    try:
        for name, p in (
            ("gcp", gcp_tests.provider(gke)),
            ("azure", azure_tests.provider(arm)),
        ):
            found = check_target(name, p, "site-a", SHIPPED)
            assert [(f.what, f.ok) for f in found] == [
                ("cluster", True),
                ("node pools", True),
                ("GPU quota", None),  # read only on AWS so far
            ], found
    finally:
        gke.stop()
        arm.stop()


def test_the_command_checks_the_demo_targets() -> None:
    result = CliRunner().invoke(
        app, ["target", "check", "-c", str(ROOT / "burst" / "data" / "demo" / "config.yaml")]
    )
    assert result.exit_code == 0, result.output
    assert "ok   sim-aws  cluster: simulated aws cluster in eu-central-1" in result.output
    bad = CliRunner().invoke(
        app,
        ["target", "check", "-c", str(ROOT / "burst" / "data" / "demo" / "config.yaml"), "-t", "x"],
    )
    assert bad.exit_code == 1 and "no target x in the ServiceConfig" in bad.output
