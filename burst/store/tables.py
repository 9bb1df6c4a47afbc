"""The database tables: what burst remembers between passes and across crashes.

Every step of the flow reads and writes these through database.py sessions. Pool and dispatch rows are
written as intent *before* the cloud or cluster call they describe, so a crash between the two
leaves a row the next pass reconciles. Money columns are integer micro-units plus an ISO 4217
code; ledger rows are append-only (corrections are new rows pointing at the row they correct).
Any change here needs an Alembic migration in burst/migrations/versions/ (`burst db check`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names, so migrations can drop and alter them on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

POOL_STATES = (
    "requested",
    "creating",
    "ready",
    "resizing",
    "draining",
    "deleting",
    "deleted",
    "failed",
)
WORKLOAD_STATES = (
    "pending",
    "planned",
    "dispatched",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "requeued",
)
LEDGER_KINDS = ("usage", "overhead", "idle", "correction")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every database (SQLite keeps no zone of its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; pass a timezone-aware one")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Workload(Base):
    """A local Job or PyTorchJob that burst has seen and may burst."""

    __tablename__ = "workloads"
    __table_args__ = (
        CheckConstraint(_in("state", WORKLOAD_STATES), name="state"),
        UniqueConstraint("uid"),
        Index("ix_workloads_state", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uid: Mapped[str] = mapped_column(String(64))  # the local object's metadata.uid
    kind: Mapped[str] = mapped_column(String(32))
    namespace: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    team: Mapped[str] = mapped_column(String(253))
    policy: Mapped[str | None] = mapped_column(String(253))
    state: Mapped[str] = mapped_column(String(16), default="pending")
    state_reason: Mapped[str | None] = mapped_column(Text)
    accelerator: Mapped[str | None] = mapped_column(String(64))
    gpus_per_pod: Mapped[int] = mapped_column(Integer)
    pods: Mapped[int] = mapped_column(Integer, default=1)
    deadline: Mapped[datetime | None] = mapped_column(UTCDateTime)
    expected_runtime_s: Mapped[int | None] = mapped_column(Integer)  # declared or learned
    runtime_source: Mapped[str | None] = mapped_column(Text)  # "declared", or how it was learned
    max_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    currency: Mapped[str | None] = mapped_column(String(3))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Pool(Base):
    """A cloud node pool burst asked for; the row exists before the cloud call that creates it."""

    __tablename__ = "pools"
    __table_args__ = (
        CheckConstraint(_in("state", POOL_STATES), name="state"),
        CheckConstraint(_in("capacity", ("on-demand", "spot")), name="capacity"),
        CheckConstraint("nodes_desired >= 0", name="nodes_desired"),
        UniqueConstraint("name"),
        UniqueConstraint("token"),
        Index("ix_pools_state", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63))  # deterministic from target, offer, generation
    token: Mapped[str] = mapped_column(String(64))  # idempotency token of the create call
    target: Mapped[str] = mapped_column(String(63))
    provider: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(64))  # where its nodes are, if one zone
    instance_type: Mapped[str] = mapped_column(String(64))
    capacity: Mapped[str] = mapped_column(String(16))
    accelerator: Mapped[str] = mapped_column(String(64))
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    nodes_desired: Mapped[int] = mapped_column(Integer)
    nodes_ready: Mapped[int] = mapped_column(Integer, default=0)
    policy: Mapped[str] = mapped_column(String(253))
    generation: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(16), default="requested")
    state_reason: Mapped[str | None] = mapped_column(Text)
    external_id: Mapped[str | None] = mapped_column(String(512))  # the cloud's id / ARN
    unit_price_micros: Mapped[int] = mapped_column(BigInteger)  # per node-hour
    currency: Mapped[str] = mapped_column(String(3))
    price_source: Mapped[str] = mapped_column(String(16))
    epoch: Mapped[int] = mapped_column(BigInteger)  # fencing epoch of the leader that asked
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class PoolInstance(Base):
    """A node instance of a pool as its cloud reported it, launched and ended: the meter bills each
    instance from these where the cloud says (each with its own billing minimum), and from the
    pool's node counts where it does not."""

    __tablename__ = "pool_instances"
    __table_args__ = (UniqueConstraint("pool_id", "instance_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"))
    instance_id: Mapped[str] = mapped_column(String(255))
    launched: Mapped[datetime] = mapped_column(UTCDateTime)
    ended: Mapped[datetime | None] = mapped_column(UTCDateTime)


class PoolEvent(Base):
    """A pool's state transition; the meter reads pool time from these."""

    __tablename__ = "pool_events"
    __table_args__ = (Index("ix_pool_events_pool_id_at", "pool_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    nodes: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    epoch: Mapped[int] = mapped_column(BigInteger)


class Dispatch(Base):
    """A workload sent to a pool: the remote object's deterministic name and what became of it."""

    __tablename__ = "dispatches"
    __table_args__ = (
        UniqueConstraint("workload_id", "attempt"),
        UniqueConstraint("target", "remote_namespace", "remote_name"),
        Index("ix_dispatches_created_at", "created_at"),  # the last hour's, counted each pass
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id"))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    target: Mapped[str] = mapped_column(String(63))
    remote_namespace: Mapped[str] = mapped_column(String(253))
    remote_name: Mapped[str] = mapped_column(String(253))
    remote_uid: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    state_reason: Mapped[str | None] = mapped_column(Text)
    # The failed pods its copy counted when last seen running: whether a Pending spell after it
    # counts more tells the copy's own failure from a lost node (service/remote.py).
    failures_at_run: Mapped[int | None] = mapped_column(Integer)
    # When its copy was first seen running since it was last Pending (None: not yet): the plan
    # expects it to end a runtime after (service/loop.py), not a runtime after its dispatch,
    # which onto a launching pool is the launch earlier.
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    epoch: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class LedgerEntry(Base):
    """One posted charge. Never updated or deleted: a correction is a new row with `corrects_id`.

    `idempotency_key` (pool + interval + kind + workload) makes metering the same interval twice,
    or again after a crash, a no-op.
    """

    __tablename__ = "ledger_entries"
    __table_args__ = (
        CheckConstraint(_in("kind", LEDGER_KINDS), name="kind"),
        CheckConstraint("period_end >= period_start", name="period"),
        UniqueConstraint("idempotency_key"),
        Index("ix_ledger_entries_period_start", "period_start"),
        Index("ix_ledger_entries_team", "team"),
        Index("ix_ledger_entries_workload_uid", "workload_uid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    posted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    period_start: Mapped[datetime] = mapped_column(UTCDateTime)
    period_end: Mapped[datetime] = mapped_column(UTCDateTime)
    pool_id: Mapped[int | None] = mapped_column(ForeignKey("pools.id"))
    pool: Mapped[str | None] = mapped_column(String(63))  # the pool's name, as on its cloud tags
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workloads.id"))
    workload_uid: Mapped[str | None] = mapped_column(String(64))
    namespace: Mapped[str | None] = mapped_column(String(253))
    team: Mapped[str] = mapped_column(String(253))
    policy: Mapped[str | None] = mapped_column(String(253))
    provider: Mapped[str | None] = mapped_column(String(16))
    region: Mapped[str | None] = mapped_column(String(64))
    gpu_seconds: Mapped[int] = mapped_column(BigInteger, default=0)
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    unit_price_micros: Mapped[int | None] = mapped_column(BigInteger)  # per node-hour
    price_source: Mapped[str | None] = mapped_column(String(16))
    corrects_id: Mapped[int | None] = mapped_column(ForeignKey("ledger_entries.id"))
    note: Mapped[str | None] = mapped_column(Text)
    workload_name: Mapped[str | None] = mapped_column(String(253))  # namespace/name when posted
    instance_type: Mapped[str | None] = mapped_column(String(64))
    capacity: Mapped[str | None] = mapped_column(String(16))  # on-demand or spot
    zone: Mapped[str | None] = mapped_column(String(64))
    account: Mapped[str | None] = mapped_column(String(64))  # AWS account, GCP project, Azure sub.
    row_hash: Mapped[str | None] = mapped_column(String(64))  # chained: see money/chain.py


class BudgetReservation(Base):
    """Money set aside for a planned or running pool, counted against budgets until released."""

    __tablename__ = "budget_reservations"
    __table_args__ = (
        CheckConstraint(_in("state", ("held", "released")), name="state"),
        CheckConstraint("amount_micros >= 0", name="amount"),
        Index("ix_budget_reservations_budget_state", "budget", "state"),
        Index("ix_budget_reservations_workload", "workload_id", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    budget: Mapped[str] = mapped_column(String(253))
    pool_id: Mapped[int | None] = mapped_column(ForeignKey("pools.id"))
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workloads.id"))
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    state: Mapped[str] = mapped_column(String(16), default="held")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class BudgetLock(Base):
    """One row per budget, updated by every reservation against it: the row lock serialises
    writers of one budget under any isolation level (under REPEATABLE READ or SERIALIZABLE the
    second writer gets a serialization failure and tries again on fresh data)."""

    __tablename__ = "budget_locks"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


class Decision(Base):
    """The audit log of the decision: every action and every skip, with its reason."""

    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_workload_uid_at", "workload_uid", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    epoch: Mapped[int] = mapped_column(BigInteger)
    workload_uid: Mapped[str | None] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))  # create-pool, dispatch, skip, ...
    reason: Mapped[str] = mapped_column(Text)
    estimated_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    currency: Mapped[str | None] = mapped_column(String(3))


class Leadership(Base):
    """The single row holding the fencing epoch: each new leader increments it, and every mutating
    transaction checks that the epoch it holds is still the current one."""

    __tablename__ = "leadership"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str] = mapped_column(String(253))
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime)


class OfferBackoff(Base):
    """An offer that failed recently, and until when it is backed off: kept here so that a
    restarted or newly elected replica does not retry a launch that just failed."""

    __tablename__ = "offer_backoffs"

    cloud: Mapped[str] = mapped_column(String(16), primary_key=True)
    region: Mapped[str] = mapped_column(String(64), primary_key=True)
    instance_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    capacity: Mapped[str] = mapped_column(String(16), primary_key=True)
    accelerator: Mapped[str] = mapped_column(String(32), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer, primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    until: Mapped[datetime] = mapped_column(UTCDateTime)
