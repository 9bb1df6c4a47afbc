"""A ledger produced by the simulated cloud: pools created, made ready, used and torn down on a
fake clock, metered and posted. Reports and reconciliation are tested on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from burst.clock import FakeClock
from burst.cloud import catalog
from burst.cloud.provider import PoolSpec
from burst.model import OfferKey
from burst.money import ledger
from burst.money.meter import PoolHistory, Use, meter
from burst.store import database
from providers.sim import SimCloud, SimProvider

START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
# The account each cloud bills, as TargetSpec.account gives it: AWS account, GCP project, Azure
# subscription.
ACCOUNTS = {
    "aws": "123456789012",
    "gcp": "ml-burst-2026",
    "azure": "0b1f6471-1bf0-4dda-aec3-cb9272f09590",
}
# (target, cloud, region, offer, nodes, team, policy, namespace, workload, job hours, start day)
SCENARIO = [
    (
        "aws-euc1",
        "aws",
        "eu-central-1",
        OfferKey("aws", "eu-central-1", "p3.8xlarge", "on-demand", "V100", 4),
        2,
        "cms-ml",
        "ml-training",
        "cms-ml",
        "higgs-train",
        5,
        0,
    ),
    (
        "gcp-euw4",
        "gcp",
        "europe-west4",
        OfferKey("gcp", "europe-west4", "n1-standard-8", "spot", "T4", 1),
        4,
        "atlas-ml",
        "ml-training",
        "atlas-ml",
        "tracking",
        3,
        1,
    ),
    (
        "azure-eastus",
        "azure",
        "eastus",
        OfferKey("azure", "eastus", "Standard_NC24ads_A100_v4", "on-demand", "A100-80GB", 1),
        1,
        "cms-ml",
        "ml-training",
        "cms-ml",
        "llm-finetune",
        50,  # across three days: Azure bills by the day
        3,
    ),
]


def build_ledger(url: str, seed: int = 4) -> dict[str, str]:
    """Run the scenario and post its charges to the database at `url`; returns pool -> cloud."""
    engine = database.make_engine(url)
    database.upgrade(engine)
    sessions = database.sessions(engine)
    shipped = catalog.shipped()
    clock = FakeClock(START)
    world = SimCloud(clock, seed=seed)
    pools = {}
    for (
        target,
        cloud,
        region,
        offer,
        nodes,
        team,
        policy,
        namespace,
        workload,
        hours,
        day,
    ) in SCENARIO:
        sim = SimProvider(
            world,
            target=target,
            cloud=cloud,
            region=region,  # type: ignore[arg-type]
            offers=lambda: list(shipped),
        )
        clock.advance(max(timedelta(0), START + timedelta(days=day) - clock.now()))
        name = f"{target}-{offer.instance_type.lower().replace('_', '-').replace('.', '-')}-1"
        created = clock.now()
        sim.create_pool(
            PoolSpec(name=name, offer=offer, nodes=nodes, owner="site-a", policy=policy, epoch=1),
            "t",
        )
        while sim.get_pool(name).phase != "ready":
            clock.advance(timedelta(seconds=30))
        ready = clock.now()
        clock.advance(timedelta(hours=hours))
        job_end = clock.now()
        clock.advance(timedelta(minutes=10))  # the idle tail before teardown
        sim.delete_pool(name)
        deleted = clock.now()
        price = shipped.get(offer)
        assert price is not None
        history = PoolHistory(
            pool=name,
            cloud=cloud,
            team="ml-platform",
            policy=policy,  # type: ignore[arg-type]
            unit_price_micros=price.hourly.micros,
            currency="USD",
            price_source="catalog",
            gpus_per_node=offer.gpus,
            created=created,
            ready=ready,
            node_changes=((created, nodes),),
            deleted=deleted,
        )
        uses = [Use(workload, team, nodes * offer.gpus, ready, job_end)]
        context = ledger.ChargeContext(
            None,
            policy,
            cloud,
            region,
            {workload: namespace},
            {},
            workload_names={workload: f"{namespace}/{workload}"},
            instance_type=offer.instance_type,
            capacity=offer.capacity,
            account=ACCOUNTS[cloud],
        )
        with sessions.begin() as session:
            ledger.post(session, meter(history, uses, deleted + timedelta(hours=2)), context, clock)
        pools[name] = cloud
    engine.dispose()
    return pools
