"""how many of a pool's nodes were up when it was last ready: a resize's are on their way until then

`pools.nodes_ready` was in the schema but never written. From this revision the provisioner sets it
at every transition to ready; here each pool takes it from its last such event, so that a pool
resized after the upgrade shows only what the resize adds as on its way.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 01:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "UPDATE pools SET nodes_ready = COALESCE(("
        " SELECT e.nodes FROM pool_events e"
        " WHERE e.pool_id = pools.id AND e.to_state = 'ready'"
        " ORDER BY e.at DESC, e.id DESC LIMIT 1"
        "), 0)"
    )


def downgrade() -> None:
    """Nothing to undo: the column was there, and nothing before this revision read it."""
