"""Alembic environment: runs migrations on the connection burst.store.database hands over (online only)."""

from alembic import context

from burst.store.tables import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("burst migrations run through `burst db upgrade`, which passes a connection")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
