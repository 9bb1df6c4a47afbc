"""Append-only by the database's own rules, on SQLite and PostgreSQL: UPDATE, DELETE and TRUNCATE of
ledger rows are refused; a change made around the rules (as the tables' owner, with the triggers
dropped) is found by `burst ledger verify`; no downgrade drops money; a re-meter that disagrees
posts a correction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, func, make_url, select, text
from sqlalchemy.exc import DatabaseError

from burst.clock import FakeClock
from burst.money import chain, ledger
from burst.store import database
from burst.store.tables import LedgerEntry
from tests.conftest import ROOT, burst_cli
from tests.integration.test_ledger import CONTEXT, T0, charges


@pytest.fixture
def posted(engine: Engine) -> Engine:
    database.upgrade(engine)
    with database.sessions(engine).begin() as s:
        assert ledger.post(s, charges(), CONTEXT, FakeClock(T0)) == len(charges())
    return engine


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_entries SET amount_micros = 0",
        "DELETE FROM ledger_entries WHERE id = 1",
        "DELETE FROM ledger_entries",
        "TRUNCATE ledger_entries",
    ],
    ids=["update", "delete", "delete-all", "truncate"],
)
def test_the_database_refuses_to_change_or_remove_ledger_rows(
    posted: Engine, statement: str
) -> None:
    if statement.startswith("TRUNCATE") and posted.dialect.name == "sqlite":
        pytest.skip("SQLite has no TRUNCATE (a DELETE without WHERE is covered)")
    with pytest.raises(DatabaseError, match="append-only"), posted.begin() as conn:
        conn.execute(text(statement))
    with posted.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM ledger_entries")) == len(charges())


def _around_the_rules(engine: Engine, statement: str) -> None:
    """What the tables' owner could still do: drop the triggers, change a row, put them back."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE ledger_entries DISABLE TRIGGER USER"))
            conn.execute(text(statement))
            conn.execute(text("ALTER TABLE ledger_entries ENABLE TRIGGER USER"))
        else:
            conn.execute(text("DROP TRIGGER ledger_no_update"))
            conn.execute(text("DROP TRIGGER ledger_no_delete"))
            conn.execute(text(statement))


def test_verify_finds_an_edited_row(posted: Engine) -> None:
    with database.sessions(posted)() as s:
        checked, broken = chain.verify(s)
    assert (checked, broken) == (len(charges()), [])
    _around_the_rules(posted, "UPDATE ledger_entries SET amount_micros = 1 WHERE id = 3")
    with database.sessions(posted)() as s:
        _, broken = chain.verify(s)
    assert [(b.row_id, b.why.split(" ")[0]) for b in broken] == [(3, "was")]


def test_verify_finds_a_removed_row(posted: Engine) -> None:
    _around_the_rules(posted, "DELETE FROM ledger_entries WHERE id = 2")
    with database.sessions(posted)() as s:
        _, broken = chain.verify(s)
    assert [b.row_id for b in broken] == [3] and "removed" in broken[0].why


def test_a_downgrade_never_drops_money(posted: Engine) -> None:
    with pytest.raises(RuntimeError, match=r"the ledger holds \d+ rows"):
        _downgrade(posted)
    with posted.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM ledger_entries")) == len(charges())


def _downgrade(engine: Engine) -> None:
    from alembic import command

    with engine.begin() as conn:
        command.downgrade(database._alembic(conn), "base")


def test_a_re_meter_that_disagrees_posts_a_correction(posted: Engine) -> None:
    """It was skipped: the first amount stood whatever the meter said later."""
    first = charges()[0]
    later = replace(first, amount_micros=first.amount_micros + 1234)
    with database.sessions(posted).begin() as s:
        assert ledger.post(s, [later], CONTEXT, FakeClock(T0)) == 1
        assert ledger.post(s, [later], CONTEXT, FakeClock(T0)) == 0  # once
    with database.sessions(posted)() as s:
        fix = s.scalar(select(LedgerEntry).where(LedgerEntry.kind == "correction"))
        assert fix is not None and fix.amount_micros == 1234 and fix.corrects_id is not None
        booked = s.scalar(
            select(func.sum(LedgerEntry.amount_micros)).where(
                (LedgerEntry.idempotency_key == first.key)
                | (LedgerEntry.corrects_id == fix.corrects_id)
            )
        )
        assert booked == later.amount_micros
        assert chain.verify(s)[1] == []


def test_the_command_line(posted: Engine, tmp_path: Path) -> None:
    url = posted.url.render_as_string(hide_password=False)
    ok = burst_cli("ledger", "verify", "--url", url)
    assert ok.returncode == 0 and f"ok: {len(charges())} ledger row(s)" in ok.stdout
    _around_the_rules(posted, "UPDATE ledger_entries SET team = 'nobody' WHERE id = 5")
    bad = burst_cli("ledger", "verify", "--url", url)
    assert bad.returncode == 1 and "row 5 was changed" in bad.stdout
    assert "is not as it was posted" in bad.stderr and "Traceback" not in bad.stderr


def test_finance_commands_on_a_database_without_the_schema_create_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    for args in (
        ("report", "--period", "2026-11"),
        ("ledger", "verify"),
        ("db", "check"),
    ):
        result = burst_cli(*args, "--url", f"sqlite:///{db}")
        assert result.returncode == 1, result
        assert result.stderr.strip().endswith("create it with `burst db upgrade`"), result.stderr
        assert not db.exists()
    empty = tmp_path / "empty.db"
    database.make_engine(f"sqlite:///{empty}").connect().close()
    result = burst_cli("report", "--period", "2026-11", "--url", f"sqlite:///{empty}")
    assert result.returncode == 1 and "run `burst db upgrade`" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    bad = burst_cli("report", "--period", "2026-13", "--url", f"sqlite:///{empty}")
    assert bad.stderr.strip() == "error: bad period '2026-13': month must be in 1..12"


@pytest.fixture
def roles(postgres_url: str) -> Iterator[tuple[str, str]]:
    """The README's owner and service roles (named for this test) on a fresh database."""
    suffix = uuid.uuid4().hex[:8]
    owner, service = f"burst_owner_{suffix}", f"burst_service_{suffix}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        yield owner, service
    finally:
        with admin.connect() as conn:  # what the roles own or were granted goes with them
            for role in (owner, service):
                conn.execute(text(f"REASSIGN OWNED BY {role} TO CURRENT_USER"))
                conn.execute(text(f"DROP OWNED BY {role}"))
                conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


def _readme_roles_sql() -> dict[str, list[str]]:
    """The README's role statements, by the role they run as (`-- as ...` lines)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sql\n-- as a superuser\n", 1)[1].split("```", 1)[0]
    sections: dict[str, list[str]] = {"superuser": []}
    current = "superuser"
    for line in block.splitlines():
        if line.startswith("-- as "):
            current = line.removeprefix("-- as ").split(",")[0]
            sections[current] = []
        elif line.strip():
            sections[current].append(line.split(";")[0] + ";")
    return sections


@pytest.mark.postgres
def test_the_readme_roles_keep_the_service_from_changing_the_ledger(
    postgres_url: str, roles: tuple[str, str]
) -> None:
    """The service's role posts and reads ledger rows; it can neither change them nor switch the
    triggers off (only a table's owner can)."""
    owner, service = roles
    url = make_url(postgres_url)
    sql = _readme_roles_sql()
    assert set(sql) == {"superuser", "burst_owner"}, sql

    def run(engine: Engine, statements: list[str]) -> None:
        with engine.begin() as conn:
            for statement in statements:
                statement = statement.replace("burst_owner", owner).replace(
                    "burst_service", service
                )
                conn.execute(
                    text(statement.replace("DATABASE burst ", f'DATABASE "{url.database}" '))
                )

    admin = create_engine(url)
    as_owner = create_engine(url.set(username=owner, password=None))
    as_service = create_engine(url.set(username=service, password=None))
    try:
        run(admin, sql["superuser"])
        database.upgrade(as_owner)
        run(as_owner, sql["burst_owner"])
        with database.sessions(as_service).begin() as s:
            assert ledger.post(s, charges(), CONTEXT, FakeClock(T0)) == len(charges())
        with database.sessions(as_service)() as s:
            assert chain.verify(s) == (len(charges()), [])
        for statement in (
            "UPDATE ledger_entries SET amount_micros = 0",
            "DELETE FROM ledger_entries",
            "TRUNCATE ledger_entries",
        ):
            with pytest.raises(DatabaseError, match="permission denied"), as_service.begin() as c:
                c.execute(text(statement))
        for statement in (
            "ALTER TABLE ledger_entries DISABLE TRIGGER USER",
            "DROP TRIGGER ledger_append_only ON ledger_entries",
        ):
            with pytest.raises(DatabaseError, match="must be owner"), as_service.begin() as c:
                c.execute(text(statement))
        with as_service.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM ledger_entries")) == len(charges())
    finally:
        for engine in (admin, as_owner, as_service):
            engine.dispose()
