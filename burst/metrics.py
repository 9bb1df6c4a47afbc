"""The Prometheus metrics the flow records as it goes (the API serves them, with the ones it
computes from the database at each scrape)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

DECISION_SECONDS = Histogram(
    "burst_decision_seconds",
    "Time decide.plan() took",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
BUDGET_ALERTS = Counter(
    "burst_budget_alerts", "Budget alert thresholds crossed", ["budget", "threshold"]
)
PROVIDER_CALLS = Histogram(
    "burst_provider_call_seconds",
    "Cloud provider calls, by outcome",
    ["target", "operation", "outcome"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60),
)
PASS_SECONDS = Histogram(
    "burst_pass_seconds",
    "Time one reconcile pass took",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
PASS_STATEMENTS = Histogram(
    "burst_pass_statements",
    "SQL statements one reconcile pass sent",
    buckets=(10, 25, 50, 100, 250, 500, 1000, 2500, 10000),
)
QUEUE = Gauge("burst_pending_workloads", "Workloads the last plan considered (pending or planned)")
