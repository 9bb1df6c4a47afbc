"""budgets enforced across passes: a row per budget that reservations lock (correct under any
isolation level), and ledger rows that say what ran where (the workload's name, instance type,
capacity type, zone) and an index for a workload's cost

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("workload_name", 253),
    ("instance_type", 64),
    ("capacity", 16),
    ("zone", 64),
)


def upgrade() -> None:
    op.create_table(
        "budget_locks",
        sa.Column("name", sa.String(length=253), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
    )
    with op.batch_alter_table("ledger_entries") as batch:
        for name, length in COLUMNS:
            batch.add_column(sa.Column(name, sa.String(length=length), nullable=True))
    op.create_index("ix_ledger_entries_workload_uid", "ledger_entries", ["workload_uid"])
    op.create_index(
        "ix_budget_reservations_workload", "budget_reservations", ["workload_id", "state"]
    )


def downgrade() -> None:
    # Only the lock rows and an index go; the ledger's columns stay, with what they say.
    op.drop_index("ix_budget_reservations_workload", "budget_reservations")
    op.drop_index("ix_ledger_entries_workload_uid", "ledger_entries")
    op.drop_table("budget_locks")
