"""Fencing: every commit of a replaced leader is refused, on SQLite and PostgreSQL, even while it
is writing as fast as it can at the moment the new leader takes the epoch."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, func, select

from burst.clock import FakeClock
from burst.service.leader import take_epoch
from burst.store import database
from burst.store.tables import Decision

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _decision(reason: str) -> Decision:
    return Decision(at=NOW, epoch=1, workload_uid=None, action="skip", reason=reason)


def test_a_replaced_leader_cannot_commit(engine: Engine) -> None:
    database.upgrade(engine)
    plain = database.sessions(engine)
    first = take_epoch(plain, "a", FakeClock())
    old = database.fenced_sessions(engine, first)
    with old.begin() as s:
        s.add(_decision("while leading"))
    assert take_epoch(plain, "b", FakeClock()) == first + 1
    with pytest.raises(database.Fenced, match=f"epoch {first} is no longer current"), old() as s:
        s.add(_decision("after losing the lease"))
        s.commit()
    with database.fenced_sessions(engine, first + 1).begin() as s:
        s.add(_decision("the new leader"))
    with plain() as s:
        assert list(s.scalars(select(Decision.reason).order_by(Decision.id))) == [
            "while leading",
            "the new leader",
        ]


def test_no_commit_of_the_old_epoch_lands_after_the_new_one_is_taken(engine: Engine) -> None:
    database.upgrade(engine)
    plain = database.sessions(engine)
    old = database.fenced_sessions(engine, take_epoch(plain, "a", FakeClock()))
    stop = threading.Event()
    refused = []

    def write() -> None:
        while not stop.is_set():
            try:
                with old.begin() as s:
                    s.add(_decision("old"))
            except database.Fenced:
                refused.append(1)
                return

    writers = [threading.Thread(target=write) for _ in range(4)]
    for t in writers:
        t.start()
    with plain() as s:
        while (s.scalar(select(func.count()).select_from(Decision)) or 0) < 20:
            s.rollback()  # let the writers get going
    take_epoch(plain, "b", FakeClock())
    with plain() as s:
        landed = s.scalar(select(func.max(Decision.id)))
    for t in writers:
        t.join(timeout=30)
    stop.set()
    assert len(refused) == 4  # every writer was fenced off on its own
    with plain() as s:
        assert s.scalar(select(func.max(Decision.id))) == landed  # nothing landed after the epoch
