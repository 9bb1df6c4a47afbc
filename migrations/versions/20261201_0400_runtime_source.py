"""where a workload's runtime estimate came from (declared, or learned from runs seen to finish)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("runtime_source", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("runtime_source")
