"""ledger rows name their pool, workload uid and namespace, and count GPU-seconds

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 07:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_entries") as batch:
        batch.alter_column(
            "node_seconds",
            new_column_name="gpu_seconds",
            existing_type=sa.BigInteger(),
            existing_nullable=False,
        )
        batch.add_column(sa.Column("pool", sa.String(length=63), nullable=True))
        batch.add_column(sa.Column("workload_uid", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("namespace", sa.String(length=253), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("namespace")
        batch.drop_column("workload_uid")
        batch.drop_column("pool")
        batch.alter_column(
            "gpu_seconds",
            new_column_name="node_seconds",
            existing_type=sa.BigInteger(),
            existing_nullable=False,
        )
