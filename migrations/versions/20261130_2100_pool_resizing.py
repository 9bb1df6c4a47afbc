"""pools have a resizing state (a grown pool keeps running its jobs, with a clock of its own) and
the zone their nodes are in

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 21:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = "state IN ('requested', 'creating', 'ready', 'draining', 'deleting', 'deleted', 'failed')"
AFTER = (
    "state IN ('requested', 'creating', 'ready', 'resizing', 'draining', 'deleting', 'deleted', "
    "'failed')"
)


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.drop_constraint(op.f("ck_pools_state"), type_="check")
        batch.create_check_constraint(op.f("ck_pools_state"), AFTER)
        batch.add_column(sa.Column("zone", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.execute("UPDATE pools SET state = 'ready' WHERE state = 'resizing'")
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("zone")
        batch.drop_constraint(op.f("ck_pools_state"), type_="check")
        batch.create_check_constraint(op.f("ck_pools_state"), BEFORE)
