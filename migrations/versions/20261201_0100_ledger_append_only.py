"""the ledger is append-only by the database's own rules: triggers refuse UPDATE, DELETE and
TRUNCATE of its rows (PostgreSQL and SQLite), and each row carries a hash chained to the row
before it, which `burst ledger verify` recomputes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MESSAGE = "ledger_entries is append-only: post a correction instead"
# A later migration that recreates ledger_entries on SQLite (batch mode "recreate") drops these
# triggers with the old table: it must create them again.


def upgrade() -> None:
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("row_hash", sa.String(length=64), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"""
            CREATE FUNCTION burst_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'insufficient_privilege';
            END $$
            """
        )
        op.execute(
            "CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON ledger_entries "
            "FOR EACH ROW EXECUTE FUNCTION burst_ledger_append_only()"
        )
        op.execute(
            "CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger_entries "
            "FOR EACH STATEMENT EXECUTE FUNCTION burst_ledger_append_only()"
        )
    else:
        # SQLite has no TRUNCATE: a DELETE without WHERE runs the delete trigger per row.
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER ledger_no_{event.lower()} BEFORE {event} ON ledger_entries "
                f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
            )


def downgrade() -> None:
    # The rules go; the rows and their hashes stay.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER ledger_no_truncate ON ledger_entries")
        op.execute("DROP TRIGGER ledger_append_only ON ledger_entries")
        op.execute("DROP FUNCTION burst_ledger_append_only()")
    else:
        op.execute("DROP TRIGGER ledger_no_update")
        op.execute("DROP TRIGGER ledger_no_delete")
