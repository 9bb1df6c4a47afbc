"""ledger rows say which cloud account was billed (the AWS account, GCP project or Azure
subscription), as the clouds' bills do

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both databases: recreating the table on SQLite would drop the
    # append-only triggers of 0006 with it.
    op.add_column("ledger_entries", sa.Column("account", sa.String(length=64), nullable=True))


def downgrade() -> None:
    # Nothing of the ledger is dropped: the column stays with what it says (see 0005).
    pass
