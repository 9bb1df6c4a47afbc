"""The database: migrations round-trip and match the tables; money is stored as exact integers.

Runs on SQLite and, with BURST_TEST_DATABASE_URL, on PostgreSQL (the `database_url` fixture).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import BigInteger, Engine, cast, func, inspect, select, text
from sqlalchemy.exc import IntegrityError

from burst.store import database, tables
from tests.builders import pool_row

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_migrations_round_trip_and_match_the_tables(engine: Engine) -> None:
    database.upgrade(engine)
    assert database.current_revision(engine) == database.head_revision()
    database.check(engine)  # alembic check: no difference between tables.py and the migrations
    assert _tables(engine) == set(tables.Base.metadata.tables)
    database.downgrade(engine, "base")
    assert _tables(engine) == set()
    database.upgrade(engine)
    database.check(engine)


def test_check_reports_an_old_or_drifted_schema(engine: Engine) -> None:
    with pytest.raises(database.SchemaError, match="revision none"):
        database.check(engine)
    database.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_pools_state"))
    with pytest.raises(database.SchemaError, match="differ"):
        database.check(engine)


def test_each_pool_takes_its_nodes_ready_from_its_last_ready_event_on_upgrade(
    engine: Engine,
) -> None:
    # Before revision 0013 nothing wrote nodes_ready: a pool resized after the upgrade would show
    # every node as on its way. Each takes the nodes of its last transition to ready; one never
    # ready, 0.
    database.upgrade(engine, "0012")
    make = database.sessions(engine)
    with make.begin() as session:
        for name, nodes in (("grown", 3), ("resizing", 5), ("launching", 2)):
            session.add(pool_row(name=name, nodes_desired=nodes))
    with make.begin() as session:
        ids = dict(session.execute(select(tables.Pool.name, tables.Pool.id)).all())
        events = (
            ("grown", "creating", 1, 0),
            ("grown", "ready", 1, 5),
            ("grown", "resizing", 3, 6),
            ("grown", "ready", 3, 9),
            ("resizing", "ready", 2, 5),
            ("resizing", "resizing", 5, 7),
            ("launching", "creating", 2, 0),
        )
        for name, to, nodes, minute in events:
            at = NOW + timedelta(minutes=minute)
            session.add(
                tables.PoolEvent(pool_id=ids[name], at=at, to_state=to, nodes=nodes, epoch=1)
            )
    database.upgrade(engine)
    with make() as session:
        ready = dict(session.execute(select(tables.Pool.name, tables.Pool.nodes_ready)).all())
    assert ready == {"grown": 3, "resizing": 2, "launching": 0}


def test_a_million_one_micro_charges_sum_exactly(engine: Engine) -> None:
    database.upgrade(engine)
    column = next(
        c for c in inspect(engine).get_columns("ledger_entries") if c["name"] == "amount_micros"
    )
    assert isinstance(column["type"], BigInteger)
    # Rows made by the database itself: a million Python-side inserts would take most of a minute.
    series = (
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000000) "
        "SELECT i FROM s"
        if engine.dialect.name == "sqlite"
        else "SELECT i FROM generate_series(1, 1000000) AS i"
    )
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO ledger_entries (idempotency_key, kind, posted_at, period_start, "
                "period_end, team, gpu_seconds, amount_micros, currency) "
                f"SELECT 'k' || CAST(i AS TEXT), 'usage', :t, :t, :t, 'cms-ml', 1, 1, 'USD' FROM ({series}) AS g"
            ),
            {"t": NOW},
        )
    with engine.connect() as conn:
        # PostgreSQL sums BIGINT as NUMERIC; the cast brings it back to an exact Python int.
        total = conn.execute(
            select(cast(func.sum(tables.LedgerEntry.amount_micros), BigInteger))
        ).scalar_one()
    assert type(total) is int
    assert total == 1_000_000


def test_times_come_back_as_utc_and_naive_times_are_refused(engine: Engine) -> None:
    database.upgrade(engine)
    make = database.sessions(engine)
    cest = timezone(timedelta(hours=2))
    with make.begin() as session:
        session.add(
            tables.Leadership(
                id=1,
                epoch=1,
                holder="replica-a",
                acquired_at=datetime(2026, 6, 1, 14, 0, tzinfo=cest),
            )
        )
    with make() as session:
        row = session.get(tables.Leadership, 1)
        assert row is not None
        assert row.acquired_at == datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
        assert row.acquired_at.tzinfo is not None
    with pytest.raises(Exception, match="naive datetime"), make.begin() as session:
        session.add(tables.Leadership(id=1, epoch=2, holder="b", acquired_at=datetime(2026, 1, 1)))


def test_constraints_hold_on_every_database(engine: Engine) -> None:
    database.upgrade(engine)
    make = database.sessions(engine)
    with make.begin() as session:
        session.add(pool_row(token="t"))
    for bad in ({"state": "exploded"}, {"capacity": "reserved"}, {"token": "t", "name": "q"}):
        with pytest.raises(IntegrityError), make.begin() as session:
            session.add(pool_row(**{"name": "other", "token": "other", **bad}))
    with pytest.raises(IntegrityError), make.begin() as session:
        session.add(tables.Leadership(id=2, epoch=1, holder="x", acquired_at=NOW))
