"""The field types the admins' YAML documents share (documents.py): durations, amounts,
currencies and names as they are written, each with the one-line error a wrong value gets."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PlainValidator

from burst.amounts import check_currency, to_micros
from burst.durations import parse_duration


def _duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError("a duration is text such as 90s, 10m, 1h30m, 2d")
    return parse_duration(value)


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s")
    return value


def _amount(value: object) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | Decimal):
        raise ValueError("an amount is a decimal number such as 12.40")
    micros = to_micros(value)
    if micros < 0:
        raise ValueError("an amount cannot be negative")
    return Decimal(micros) / 1_000_000


_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _name(value: str) -> str:
    if len(value) > 63 or not _NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: lower-case letters, digits and '-', at most 63 characters"
        )
    return value


Duration = Annotated[timedelta, PlainValidator(_duration)]
PositiveDuration = Annotated[timedelta, PlainValidator(_duration), AfterValidator(_positive)]
Amount = Annotated[Decimal, PlainValidator(_amount)]
Currency = Annotated[str, AfterValidator(check_currency)]
Name = Annotated[str, AfterValidator(_name)]
Percent = Annotated[Decimal, Field(ge=0, le=100)]
Provider = Literal["aws", "gcp", "azure", "sim"]
CapacityPolicy = Literal["on-demand", "spot", "spot-if-slack"]
