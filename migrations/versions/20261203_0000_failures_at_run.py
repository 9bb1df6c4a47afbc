"""how many failed pods a copy had counted when it was last seen running

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("dispatches") as batch:
        batch.add_column(sa.Column("failures_at_run", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dispatches") as batch:
        batch.drop_column("failures_at_run")
