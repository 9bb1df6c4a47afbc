"""The provider registry: one Provider per burst target of the ServiceConfig.

app.py calls `build()`; cloud SDKs are imported only for the providers a configuration uses, and
their clients are made on first use, so that `burst --help`, `burst plan` and `burst report` never
load them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from burst.clock import Clock
from burst.cloud.catalog import Catalog
from burst.cloud.provider import Provider
from burst.config import ServiceConfig, TargetSpec

if TYPE_CHECKING:
    from providers.sim import SimCloud


def build(
    service: ServiceConfig,
    catalog: Catalog,
    clock: Clock,
    *,
    sim: SimCloud | None = None,
    kube_for: Callable[[TargetSpec], Any] | None = None,
) -> dict[str, Provider]:
    """{target name: Provider}. Simulated targets share `sim` (one is made if not given) and
    register their nodes through `kube_for(target)` when that gives a Kubernetes ApiClient."""

    def offers() -> list[Any]:
        return list(catalog)

    built: dict[str, Provider] = {}
    worlds: dict[Path, SimCloud] = {}
    for target in service.spec.targets:
        if target.provider == "aws":
            from providers.aws import AwsProvider

            assert target.aws is not None
            built[target.name] = AwsProvider(
                region=target.region,
                cluster=target.aws.cluster_name,
                offers=offers,
                node_role_arn=target.aws.node_role_arn,
                subnets=target.aws.subnet_ids,
                ami_type=target.aws.ami_type,
                profile=target.aws.profile,
            )
        elif target.provider == "gcp":
            from providers.gcp import GcpProvider

            assert target.gcp is not None
            built[target.name] = GcpProvider(
                project=target.gcp.project,
                location=target.gcp.location,
                cluster=target.gcp.cluster,
                region=target.region,
                offers=offers,
                credentials_file=target.gcp.credentials_file,
            )
        elif target.provider == "azure":
            from providers.azure import AzureProvider

            assert target.azure is not None
            built[target.name] = AzureProvider(
                subscription_id=target.azure.subscription_id,
                resource_group=target.azure.resource_group,
                cluster=target.azure.cluster,
                region=target.region,
                offers=offers,
                managed_identity_client_id=target.azure.managed_identity_client_id,
            )
        else:
            from providers.sim import SimCloud, SimProvider

            assert target.sim is not None
            state = Path(target.sim.state_file) if target.sim.state_file else None
            if state is not None:  # the world of that file, shared by the targets naming it
                world = worlds.setdefault(state, SimCloud(clock, state=state))
            else:
                world = sim = sim or SimCloud(clock)
            built[target.name] = SimProvider(
                world,
                target=target.name,
                cloud=target.cloud,
                region=target.region,
                offers=offers,
                kube=kube_for(target) if kube_for else None,
            )
    return built
