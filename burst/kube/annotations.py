"""The burst annotations a user puts on a workload, read once for the service and `burst explain`:
`deadline` (an RFC 3339 time, or a duration from creation such as 6h), `expected-runtime` (a
duration) and `max-cost` (an amount in the policy currency, or "12.40 CHF"). Pure. A value that
cannot be used is ignored, and said so: the observer puts each problem in a Warning Event on the
job, `burst explain` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import TypeVar

from burst.amounts import Money
from burst.durations import DurationError, parse_duration

T = TypeVar("T")


@dataclass(frozen=True)
class BurstAnnotations:
    deadline: datetime | None = None
    expected_runtime: timedelta | None = None
    max_cost: Money | None = None


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


# A deadline or runtime a decade away is a typo, and the decision adds durations to it: past
# these it overflowed datetime (the pass failed) rather than being reported on the job.
LONGEST = timedelta(days=3650)


def _deadline(value: str, created: datetime) -> datetime:
    try:
        return created + _bounded(parse_duration(value))
    except DurationError:
        pass
    try:
        parsed = parse_time(value)
    except ValueError:
        parsed = None
    if parsed is None:
        raise ValueError("expected an RFC 3339 time or a duration such as 6h")
    if parsed < created:
        raise ValueError(f"it is before the job was created ({created:%Y-%m-%dT%H:%M:%SZ})")
    _bounded(parsed - created)
    return parsed


def _bounded(delta: timedelta) -> timedelta:
    if delta > LONGEST:
        raise ValueError(f"it is more than {LONGEST.days} days away")
    return delta


def _runtime(value: str) -> timedelta:
    runtime = parse_duration(value)
    if runtime <= timedelta(0):
        raise ValueError("a runtime is longer than nothing")
    return _bounded(runtime)


def _money(value: str, currency: str) -> Money:
    text = value.strip()
    try:
        money = Money.parse(text) if " " in text else Money.of(Decimal(text), currency)
    except (InvalidOperation, ValueError) as exc:
        raise ValueError("expected an amount such as 12.40 or 12.40 CHF") from exc
    if money.micros < 0:
        raise ValueError("a cost cap cannot be negative")
    return money


def read_annotations(
    annotations: Mapping[str, str], prefix: str, created: datetime, currency: str
) -> tuple[BurstAnnotations, list[str]]:
    """The usable burst annotations, and a sentence for each one that is not."""
    problems: list[str] = []

    def read(key: str, parse: Callable[[str], T]) -> T | None:
        value = annotations.get(prefix + key)
        if value is None:
            return None
        try:
            return parse(str(value))
        except (ValueError, DurationError, ArithmeticError, OverflowError) as exc:
            problems.append(f"{prefix}{key}={value!r} is ignored: {exc}")
            return None

    found = BurstAnnotations(
        deadline=read("deadline", lambda v: _deadline(v, created)),
        expected_runtime=read("expected-runtime", _runtime),
        max_cost=read("max-cost", lambda v: _money(v, currency)),
    )
    return found, problems
