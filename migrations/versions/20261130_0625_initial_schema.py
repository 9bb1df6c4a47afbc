"""initial schema: workloads, pools and their events, dispatches, ledger, reservations,
decisions, leadership

Revision ID: 0001
Revises:
Create Date: 2026-11-30 06:25:48.365360
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("workload_uid", sa.String(length=64), nullable=True),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("estimated_cost_micros", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    op.create_index(
        "ix_decisions_workload_uid_at", "decisions", ["workload_uid", "at"], unique=False
    )

    op.create_table(
        "leadership",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(length=253), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_leadership_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leadership")),
    )
    op.create_table(
        "pools",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=63), nullable=False),
        sa.Column("provider", sa.String(length=16), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("capacity", sa.String(length=16), nullable=False),
        sa.Column("accelerator", sa.String(length=64), nullable=False),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("nodes_desired", sa.Integer(), nullable=False),
        sa.Column("nodes_ready", sa.Integer(), nullable=False),
        sa.Column("policy", sa.String(length=253), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("external_id", sa.String(length=512), nullable=True),
        sa.Column("unit_price_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("price_source", sa.String(length=16), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("capacity IN ('on-demand', 'spot')", name=op.f("ck_pools_capacity")),
        sa.CheckConstraint(
            "state IN ('requested', 'creating', 'ready', 'draining', 'deleting', 'deleted', 'failed')",
            name=op.f("ck_pools_state"),
        ),
        sa.CheckConstraint("nodes_desired >= 0", name=op.f("ck_pools_nodes_desired")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pools")),
        sa.UniqueConstraint("name", name=op.f("uq_pools_name")),
        sa.UniqueConstraint("token", name=op.f("uq_pools_token")),
    )
    op.create_index("ix_pools_state", "pools", ["state"], unique=False)

    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("team", sa.String(length=253), nullable=False),
        sa.Column("policy", sa.String(length=253), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("accelerator", sa.String(length=64), nullable=True),
        sa.Column("gpus_per_pod", sa.Integer(), nullable=False),
        sa.Column("pods", sa.Integer(), nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expected_runtime_s", sa.Integer(), nullable=True),
        sa.Column("max_cost_micros", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "state IN ('pending', 'planned', 'dispatched', 'running', 'succeeded', 'failed', 'cancelled', 'requeued')",
            name=op.f("ck_workloads_state"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("uid", name=op.f("uq_workloads_uid")),
    )
    op.create_index("ix_workloads_state", "workloads", ["state"], unique=False)

    op.create_table(
        "budget_reservations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("budget", sa.String(length=253), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=True),
        sa.Column("workload_id", sa.Integer(), nullable=True),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('held', 'released')", name=op.f("ck_budget_reservations_state")
        ),
        sa.CheckConstraint("amount_micros >= 0", name=op.f("ck_budget_reservations_amount")),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_budget_reservations_pool_id_pools")
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_budget_reservations_workload_id_workloads"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_reservations")),
    )
    op.create_index(
        "ix_budget_reservations_budget_state",
        "budget_reservations",
        ["budget", "state"],
        unique=False,
    )

    op.create_table(
        "dispatches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(length=63), nullable=False),
        sa.Column("remote_namespace", sa.String(length=253), nullable=False),
        sa.Column("remote_name", sa.String(length=253), nullable=False),
        sa.Column("remote_uid", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_dispatches_pool_id_pools")
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_dispatches_workload_id_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dispatches")),
        sa.UniqueConstraint(
            "target",
            "remote_namespace",
            "remote_name",
            name=op.f("uq_dispatches_target_remote_namespace_remote_name"),
        ),
        sa.UniqueConstraint(
            "workload_id", "attempt", name=op.f("uq_dispatches_workload_id_attempt")
        ),
    )
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("period_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=True),
        sa.Column("workload_id", sa.Integer(), nullable=True),
        sa.Column("team", sa.String(length=253), nullable=False),
        sa.Column("policy", sa.String(length=253), nullable=True),
        sa.Column("provider", sa.String(length=16), nullable=True),
        sa.Column("region", sa.String(length=64), nullable=True),
        sa.Column("node_seconds", sa.BigInteger(), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("unit_price_micros", sa.BigInteger(), nullable=True),
        sa.Column("price_source", sa.String(length=16), nullable=True),
        sa.Column("corrects_id", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "kind IN ('usage', 'overhead', 'idle', 'correction')",
            name=op.f("ck_ledger_entries_kind"),
        ),
        sa.CheckConstraint("period_end >= period_start", name=op.f("ck_ledger_entries_period")),
        sa.ForeignKeyConstraint(
            ["corrects_id"],
            ["ledger_entries.id"],
            name=op.f("fk_ledger_entries_corrects_id_ledger_entries"),
        ),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_ledger_entries_pool_id_pools")
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_ledger_entries_workload_id_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_ledger_entries_idempotency_key")),
    )
    op.create_index(
        "ix_ledger_entries_period_start", "ledger_entries", ["period_start"], unique=False
    )
    op.create_index("ix_ledger_entries_team", "ledger_entries", ["team"], unique=False)

    op.create_table(
        "pool_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_pool_events_pool_id_pools")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_events")),
    )
    op.create_index("ix_pool_events_pool_id_at", "pool_events", ["pool_id", "at"], unique=False)


def downgrade() -> None:
    # Money is never dropped: with ledger rows, this downgrade refuses (export them first).
    rows = op.get_bind().execute(sa.text("SELECT count(*) FROM ledger_entries")).scalar()
    if rows:
        raise RuntimeError(
            f"the ledger holds {rows} rows: a downgrade past revision 0001 would drop them"
        )
    # Dropping a table drops its indexes; children before parents.
    for table in (
        "pool_events",
        "ledger_entries",
        "dispatches",
        "budget_reservations",
        "workloads",
        "pools",
        "leadership",
        "decisions",
    ):
        op.drop_table(table)
