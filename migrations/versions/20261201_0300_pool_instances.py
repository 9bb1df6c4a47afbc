"""pools' node instances as their clouds report them, so that each is billed with its own minimum

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pool_instances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=255), nullable=False),
        sa.Column("launched", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_pool_instances_pool_id_pools")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_instances")),
        sa.UniqueConstraint(
            "pool_id", "instance_id", name=op.f("uq_pool_instances_pool_id_instance_id")
        ),
    )


def downgrade() -> None:
    op.drop_table("pool_instances")
