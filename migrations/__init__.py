"""The database schema's Alembic migrations, shipped with the package for `burst db upgrade`."""
