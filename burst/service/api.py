"""The read-only HTTP API and the Prometheus metrics of `burst serve`.

FastAPI publishes the OpenAPI document at /openapi.json. /healthz and /readyz are open (kubelet
probes); /metrics and /api/v1/* need the bearer token from the mounted secret, compared in
constant time. Every endpoint only reads: the database for workloads, pools, budgets and the ledger,
and the reconciler's last plan. Metrics are computed from the database at scrape time, so every
replica (leader or not) reports the same numbers.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from burst.decide.snapshot import plan_document
from burst.metrics import (
    BUDGET_ALERTS,
    DECISION_SECONDS,
    PASS_SECONDS,
    PASS_STATEMENTS,
    PROVIDER_CALLS,
    QUEUE,
)
from burst.model import Plan
from burst.money import ledger
from burst.store.tables import LedgerEntry, Pool, Workload


class _DatabaseCollector(Collector):
    """Workloads and pools by state, spend and budget use, read from the database per scrape."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        budgets: Sequence[ledger.BudgetLimit],
        rates: Callable[[datetime], Mapping[str, Decimal]],
        now: Callable[[], datetime],
    ) -> None:
        self.sessions, self.budgets, self.rates, self.now = sessions, budgets, rates, now

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.sessions() as s:
            workloads = GaugeMetricFamily(
                "burst_workloads", "Workloads burst has seen, by state", labels=["state"]
            )
            for state, count in s.execute(
                select(Workload.state, func.count()).group_by(Workload.state)
            ):
                workloads.add_metric([state], count)
            pools = GaugeMetricFamily(
                "burst_pools", "Pools by state and cloud", labels=["state", "provider"]
            )
            for state, provider, count in s.execute(
                select(Pool.state, Pool.provider, func.count()).group_by(Pool.state, Pool.provider)
            ):
                pools.add_metric([state, provider], count)
            spend = GaugeMetricFamily(
                "burst_spend_micros", "Posted spend in micro-units", labels=["team", "currency"]
            )
            for team, currency, total in s.execute(
                select(
                    LedgerEntry.team, LedgerEntry.currency, func.sum(LedgerEntry.amount_micros)
                ).group_by(LedgerEntry.team, LedgerEntry.currency)
            ):
                spend.add_metric([team, currency], float(total or 0))
            rate = GaugeMetricFamily(
                "burst_spend_rate_micros_per_hour",
                "What the live pools cost an hour at their recorded prices",
                labels=["provider", "currency"],
            )
            for provider, currency, total in s.execute(
                select(
                    Pool.provider, Pool.currency, func.sum(Pool.nodes_desired * Pool.unit_price_micros)
                )
                .where(Pool.state.in_(("creating", "ready", "resizing", "draining", "deleting")))
                .group_by(Pool.provider, Pool.currency)
            ):  # fmt: skip
                rate.add_metric([provider, currency], float(total or 0))
            used = GaugeMetricFamily(
                "burst_budget_used_ratio",
                "Share of each budget used (posted + held)",
                labels=["budget"],
            )
            for b in self.budgets:
                used.add_metric(
                    [b.name],
                    ledger.used(s, b, self.now(), self.rates(self.now())).micros
                    / max(b.amount.micros, 1),
                )
        yield from (workloads, pools, spend, rate, used)


def create_app(
    sessions: sessionmaker[Session],
    *,
    token: str | None,
    budgets: Sequence[ledger.BudgetLimit] = (),
    rates: Callable[[datetime], Mapping[str, Decimal]] = lambda _: {},
    last_plan: Callable[[], Plan | None] = lambda: None,
    now: Callable[[], datetime],
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    registry = registry or CollectorRegistry()
    registry.register(_DatabaseCollector(sessions, budgets, rates, now))
    registry.register(DECISION_SECONDS)
    registry.register(BUDGET_ALERTS)
    registry.register(PROVIDER_CALLS)
    for metric in (PASS_SECONDS, PASS_STATEMENTS, QUEUE):
        registry.register(metric)
    app = FastAPI(
        title="burst",
        version="1",
        description="Read-only status of burst: workloads, pools, "
        "budgets, the ledger and the current plan.",
    )

    def authorised(authorization: str | None = Header(default=None)) -> None:
        if token is None:
            return
        # The Bearer scheme only (RFC 6750 section 2.1): a bare token or another scheme is refused.
        scheme, _, given = (authorization or "").partition(" ")
        if scheme != "Bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(
                status_code=401,
                detail="a valid bearer token is required",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> dict[str, str]:
        with sessions() as s:
            s.execute(select(1))
        return {"status": "ready"}

    @app.get(
        "/metrics",
        dependencies=[Depends(authorised)],
        response_class=PlainTextResponse,  # documented as the Prometheus text it is, not JSON
        responses={200: {"content": {"text/plain": {}}}},
    )
    def metrics() -> Response:
        return Response(
            generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    @app.get("/api/v1/workloads", dependencies=[Depends(authorised)])
    def workloads(state: str | None = None) -> list[dict[str, Any]]:
        with sessions() as s:
            query = select(Workload).order_by(Workload.id)
            if state:
                query = query.where(Workload.state == state)
            return [
                {
                    "uid": w.uid,
                    "kind": w.kind,
                    "namespace": w.namespace,
                    "name": w.name,
                    "team": w.team,
                    "policy": w.policy,
                    "state": w.state,
                    "reason": w.state_reason,
                    # the runtime its last dispatch was planned with, and where it came from
                    # (none: the policy's default)
                    "expected_runtime_s": w.expected_runtime_s,
                    "runtime_source": w.runtime_source,
                }
                for w in s.scalars(query)
            ]

    @app.get("/api/v1/pools", dependencies=[Depends(authorised)])
    def pools() -> list[dict[str, Any]]:
        with sessions() as s:
            return [
                {
                    "name": p.name,
                    "target": p.target,
                    "cloud": p.provider,
                    "region": p.region,
                    "instance_type": p.instance_type,
                    "capacity": p.capacity,
                    "nodes": p.nodes_desired,
                    "state": p.state,
                    "reason": p.state_reason,
                    "created": p.created_at.isoformat(),
                }
                for p in s.scalars(select(Pool).order_by(Pool.id))
            ]

    @app.get("/api/v1/budgets", dependencies=[Depends(authorised)])
    def budget_status() -> list[dict[str, Any]]:
        with sessions() as s:
            out = []
            for b in budgets:
                used = ledger.used(s, b, now(), rates(now()))
                out.append(
                    {
                        "name": b.name,
                        "scope": f"{b.scope}={b.value}",
                        "period": b.period,
                        "amount": b.amount.json(),
                        "used": used.json(),
                        "left": (b.amount - used).json(),
                        "hard": b.hard,
                    }
                )
            return out

    @app.get("/api/v1/ledger", dependencies=[Depends(authorised)])
    def ledger_rows(limit: int = Query(default=100, ge=1, le=10_000)) -> list[dict[str, Any]]:
        with sessions() as s:
            rows = s.scalars(select(LedgerEntry).order_by(LedgerEntry.id.desc()).limit(limit))
            return [
                {
                    "id": r.id,
                    "kind": r.kind,
                    "pool": r.pool,
                    "workload": r.workload_uid,
                    "team": r.team,
                    "period_start": r.period_start.isoformat(),
                    "gpu_seconds": r.gpu_seconds,
                    "amount": f"{Decimal(r.amount_micros) / 1_000_000} {r.currency}",
                    "corrects": r.corrects_id,
                }
                for r in rows
            ]

    @app.get("/api/v1/plan", dependencies=[Depends(authorised)])
    def plan() -> dict[str, Any]:
        current = last_plan()
        return plan_document(current) if current is not None else {"actions": [], "skips": []}

    return app
