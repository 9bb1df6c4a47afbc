"""offers backed off after a failure are remembered across restarts and failovers

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "offer_backoffs",
        sa.Column("cloud", sa.String(length=16), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("capacity", sa.String(length=16), nullable=False),
        sa.Column("accelerator", sa.String(length=32), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "cloud",
            "region",
            "instance_type",
            "capacity",
            "accelerator",
            "gpus",
            name=op.f("pk_offer_backoffs"),
        ),
    )


def downgrade() -> None:
    op.drop_table("offer_backoffs")
