"""The composition root of `burst serve`: configuration, database, clusters, clouds and clock wired
into a Reconciler, the Service that schedules it (service/leader.py), leader election on a Lease, and
the HTTP API. `burst demo` wires its embedded world through `reconciler_for` the same way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from burst import config
from burst.clock import Clock, SystemClock
from burst.cloud import catalog
from burst.cloud.catalog import UnavailableOffers
from burst.cloud.provider import Provider
from burst.cloud.provision import Provisioner
from burst.config import Config, KubernetesAccess, TargetSpec
from burst.kube.connect import cloud_client
from burst.kube.copies import RemoteCopies
from burst.kube.events import EventRecorder
from burst.kube.observe import Observer
from burst.kube.replicate import KubeObjects, Replicator
from burst.kube.sync import Syncer
from burst.model import OfferKey
from burst.money import ledger
from burst.service.leader import Service
from burst.service.loop import Reconciler
from burst.service.remote import CLUSTER_ERRORS
from burst.store import database

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """What keeps `burst serve` from starting, in one line naming the setting to fix."""


def kube_client(access: KubernetesAccess, setting: str = "spec.onPrem") -> Any:
    """An ApiClient, every call with a deadline, from in-cluster credentials or a kubeconfig."""
    from kubernetes import client
    from kubernetes import config as kube_config
    from kubernetes.config.config_exception import ConfigException

    from burst.kube.connect import TimedApiClient

    configuration = client.Configuration()
    try:
        if access.in_cluster:
            kube_config.load_incluster_config(client_configuration=configuration)
        else:
            kube_config.load_kube_config(
                config_file=access.kubeconfig,
                context=access.context,
                client_configuration=configuration,
            )
    except (ConfigException, OSError) as exc:
        how = (
            "inCluster: true, but this is not a pod with a service account"
            if access.in_cluster
            else f"kubeconfig {access.kubeconfig or '~/.kube/config'}"
            + (f" context {access.context}" if access.context else "")
        )
        raise StartupError(f"{setting}: {how}: {_first_line(exc)}") from None
    return TimedApiClient(configuration)


def _sim_kube(target: TargetSpec, remote_apis: dict[str, Any]) -> Any:
    """Where a simulated cloud registers its nodes: its own way in, else burst's."""
    if target.sim is not None and target.sim.kubeconfig:
        access = KubernetesAccess(kubeconfig=target.sim.kubeconfig)
        return kube_client(access, f"targets {target.name}: sim.kubeconfig")
    return remote_apis[target.name]


def reachable(api: Any, setting: str) -> None:
    """Raise StartupError unless the cluster's API server answers (its /version)."""
    from kubernetes import client

    try:
        client.VersionApi(api).get_code(_request_timeout=10)
    except Exception as exc:  # any failure to answer is the same to the operator
        host = api.configuration.host
        reason = getattr(exc, "reason", None) or _first_line(exc)
        raise StartupError(f"{setting}: cannot reach the API server at {host}: {reason}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__


def _cluster_access(provider: Provider, target: str) -> Any:
    """The provider's way into its cluster (the config allows fromCloud on cloud targets only)."""
    access = getattr(provider, "cluster_access", None)
    if access is None:
        raise ValueError(f"target {target}: its provider cannot open its cluster (fromCloud)")
    return access()


def reconciler_for(
    cfg: Config,
    offers: catalog.Catalog,
    clock: Clock,
    sessions: sessionmaker[Session],
    observer: Observer,
    onprem: Any,
    remote_apis: Mapping[str, Any],
    providers: Mapping[str, Provider],
    *,
    epoch: int = 1,
    launch_factor: int = 3,
    mirror_copies: bool = False,
) -> Reconciler:
    """The reconcile pass and its collaborators, for `burst serve` and `burst demo` alike.
    `mirror_copies`: keep each remote cluster's copies by a watch rather than listing them every
    pass (the service's way; tests that drive single passes list)."""
    assert cfg.service is not None
    spec = cfg.service.spec
    events = EventRecorder(onprem, clock)
    local = KubeObjects(onprem)
    remotes = {n: KubeObjects(a) for n, a in remote_apis.items()}

    def zones(key: OfferKey) -> tuple[str, ...]:
        offer = offers.get(key)
        return offer.zones if offer is not None else ()

    def joined(target: str, pool: str) -> int | None:
        if target not in remotes:
            return None  # no view of that cluster: the cloud's word is taken
        try:
            return remotes[target].ready_gpu_nodes(pool)
        except CLUSTER_ERRORS as exc:  # not seen: not ready yet
            log.warning("nodes of pool %s on %s: %s", pool, target, exc.__class__.__name__)
            return 0

    return Reconciler(
        config=cfg,
        catalog=offers,
        clock=clock,
        sessions=sessions,
        observer=observer,
        local=local,
        remotes=remotes,
        provisioner=Provisioner(
            providers,
            clock,
            UnavailableOffers(clock),
            spec.installation_id,
            epoch,
            launch_timeouts={t.name: launch_factor * t.provisioning for t in spec.targets},
            zones=zones,
            joined=joined,
        ),
        replicator=Replicator(local, events, spec.installation_id),
        syncer=Syncer(local, events, clock, spec.installation_id),
        budgets=ledger.budget_limits(cfg),
        mirrors={n: RemoteCopies(r, spec.installation_id) for n, r in remotes.items()}
        if mirror_copies
        else None,
    )


def build(config_dir: Path, identity: str, clock: Clock | None = None) -> Service:
    """Everything `burst serve` needs, from the configuration folder."""
    import providers

    clock = clock or SystemClock()
    shipped = catalog.shipped()
    cfg = config.load([config_dir], config.Vocabulary(shipped.regions(), shipped.accelerators()))
    if cfg.service is None:
        raise config.ConfigError([])
    spec = cfg.service.spec
    offers = shipped.with_overrides(spec.catalog)
    url = database.resolve_url(None, spec.database)
    engine = database.make_engine(url)
    try:
        database.check(engine)
    except OperationalError as exc:
        raise StartupError(
            f"spec.database.url (or {database.ENV_URL}): cannot reach {database.safe_url(url)}: "
            f"{_first_line(exc.orig or exc)}"
        ) from None
    sessions = database.sessions(engine)
    onprem = kube_client(spec.on_prem)
    reachable(onprem, "spec.onPrem")  # without it there is nothing to do: say so now
    remote_apis = {
        t.name: kube_client(t.kubernetes, f"spec.targets[{i}].kubernetes")
        for i, t in enumerate(spec.targets)
        if not t.kubernetes.from_cloud
    }
    built = providers.build(
        cfg.service, offers, clock, kube_for=lambda t: _sim_kube(t, remote_apis)
    )
    for t in spec.targets:  # clusters reached with the cloud's own tokens: through the provider
        if t.kubernetes.from_cloud:
            remote_apis[t.name] = cloud_client(_cluster_access(built[t.name], t.name), clock.now)
    observer = Observer(
        onprem,
        clock,
        EventRecorder(onprem, clock),
        label_prefix=spec.label_prefix,
        team_label=spec.team_label,
    )

    def reconciler(epoch: int) -> Reconciler:
        if not observer.caches[0].synced.is_set():
            observer.start()
            observer.wait_synced()
        fenced = database.fenced_sessions(engine, epoch)
        return reconciler_for(
            cfg,
            offers,
            clock,
            fenced,
            observer,
            onprem,
            remote_apis,
            built,
            epoch=epoch,
            mirror_copies=True,
        )

    return Service(cfg, identity, clock, sessions, onprem, reconciler)


def run(service: Service, *, host: str | None = None, port: int | None = None) -> None:
    """Serve the API and stand for election until the process ends."""
    import uvicorn
    from kubernetes import client
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    from burst.service.api import create_app

    assert service.cfg.service is not None
    spec = service.cfg.service.spec
    token = Path(spec.api.token_file).read_text().strip() if spec.api.token_file else None
    app = create_app(
        service.sessions,
        token=token,
        budgets=ledger.budget_limits(service.cfg),
        rates=spec.usd_rates,
        last_plan=lambda: service.last_plan,
        now=service.clock.now,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=host or spec.api.host, port=port or spec.api.port, log_level="warning"
        )
    )
    threading.Thread(target=server.run, name="api", daemon=True).start()
    # The client's election reads the default configuration: point it at the on-prem cluster.
    client.Configuration.set_default(service.onprem.configuration)
    election = spec.leader_election
    duration = int(election.lease_duration.total_seconds())
    lock = LeaseLock(election.lease_name, election.namespace, service.identity)
    lock.api_instance = client.CoordinationV1Api(service.onprem)  # renewals with a deadline
    leader = leaderelection.LeaderElection(
        electionconfig.Config(
            lock,
            lease_duration=duration,
            renew_deadline=max(2, duration * 2 // 3),
            retry_period=max(1.5, duration / 5),
            onstarted_leading=service.lead,
            onstopped_leading=service.lost,
        )
    )
    leader.run()
    service.lost()  # run() returns only when leadership ends
