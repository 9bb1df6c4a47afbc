"""Small builders for decision tests: configs from plain dicts, workloads with sensible defaults."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from burst.config import BurstPolicy, Config, ServiceConfig
from burst.model import Workload

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

TARGETS: list[dict[str, Any]] = [
    {
        "name": "aws-euc1",
        "provider": "aws",
        "region": "eu-central-1",
        "aws": {
            "clusterName": "c",
            "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes",
            "subnetIds": ["subnet-1"],
        },
        "provisioningEstimate": "10m",
    },
    {
        "name": "gcp-euw4",
        "provider": "gcp",
        "region": "europe-west4",
        "gcp": {"project": "p", "location": "europe-west4", "cluster": "c"},
        "provisioningEstimate": "8m",
    },
    {
        "name": "azure-eastus",
        "provider": "azure",
        "region": "eastus",
        "azure": {"subscriptionId": "s", "resourceGroup": "g", "cluster": "c"},
        "provisioningEstimate": "12m",
    },
]


def policy_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"namespaces": ["ml"]},
        "trigger": {"deadlineSafetyMargin": "30m"},
        "placement": {"targets": [t["name"] for t in TARGETS]},
        "limits": {"currency": "USD"},
        "replication": {"imageRegistries": ["registry.example.org"]},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def make_config(
    *policies: tuple[str, dict[str, Any]],
    rates: dict[str, str] | None = None,
    targets: list[dict[str, Any]] | None = None,
    queueing: str = "StrictFIFO",
) -> Config:
    service = ServiceConfig.model_validate(
        {
            "apiVersion": "burst.dev/v1",
            "kind": "ServiceConfig",
            "metadata": {"name": "burst"},
            "spec": {
                "installationId": "test",
                "targets": targets or TARGETS,
                "usdExchangeRates": rates or {},
                "onPrem": {"queueing": queueing},
            },
        }
    )
    cfg = Config(service=service)
    for name, spec in policies or (("ml", policy_spec()),):
        cfg.policies[name] = BurstPolicy.model_validate(
            {
                "apiVersion": "burst.dev/v1",
                "kind": "BurstPolicy",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    return cfg


def workload(uid: str = "w1", **fields: Any) -> Workload:
    values: dict[str, Any] = {
        "uid": uid,
        "kind": "Job",
        "namespace": "ml",
        "name": uid,
        "team": "ml",
        "gpus_per_pod": 1,
        "pods": 1,
        "created": NOW - timedelta(minutes=10),
        "pending_since": NOW - timedelta(minutes=10),
        "accelerator": "V100",
        "burstable": True,
        "expected_runtime": timedelta(hours=2),
    }
    values.update(fields)
    return Workload(**values)


def pool_row(**fields: Any) -> Any:
    """A `pools` row (store/tables.py) with sensible defaults: one on-demand V100 node on AWS."""
    from burst.store.tables import Pool

    values: dict[str, Any] = {
        "name": "p",
        "token": "t",
        "target": "aws-eu",
        "provider": "aws",
        "region": "eu-west-1",
        "instance_type": "p3.2xlarge",
        "capacity": "on-demand",
        "accelerator": "V100",
        "gpus_per_node": 1,
        "nodes_desired": 1,
        "policy": "ml",
        "unit_price_micros": 3_060_000,
        "currency": "USD",
        "price_source": "catalog",
        "epoch": 1,
        "created_at": NOW,
        "updated_at": NOW,
    }
    values.update(fields)
    if "token" not in fields:
        values["token"] = values["name"]
    return Pool(**values)
