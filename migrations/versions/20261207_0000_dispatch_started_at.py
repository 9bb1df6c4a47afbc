"""when a dispatched copy was last seen to start running: the plan dates its expected end from it

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("dispatches") as batch:
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dispatches") as batch:
        batch.drop_column("started_at")
