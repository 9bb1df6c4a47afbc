"""an index on when each dispatch was made: each pass counts the last hour's, per policy

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 00:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_dispatches_created_at", "dispatches", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_dispatches_created_at", table_name="dispatches")
