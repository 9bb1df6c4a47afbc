"""Durations and money: the two value grammars every configuration document uses."""

from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burst.amounts import CurrencyError, Money, check_currency, to_micros
from burst.decide.caps import Rates
from burst.durations import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("10m", 600),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("0s", 0),
        (" 6h ", 21600),
    ],
    ids=["seconds", "minutes", "hours-and-minutes", "days", "week", "zero", "padded"],
)
def test_durations_people_write(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    ["10 minutes", "10", "m", "1.5h", "-5m", "30m1h", "1h1h", "", "1H"],
    ids=[
        "words",
        "no-unit",
        "no-number",
        "fraction",
        "negative",
        "small-before-large",
        "unit-twice",
        "empty",
        "upper-case",
    ],
)
def test_durations_refused_with_example(text: str) -> None:
    with pytest.raises(DurationError, match="bad duration"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**8))
def test_format_duration_reads_back(seconds: int) -> None:
    delta = timedelta(seconds=seconds)
    assert parse_duration(format_duration(delta)) == delta


def test_money_is_exact_micro_units() -> None:
    assert to_micros("0.000001") == 1
    assert to_micros("12.40") == 12_400_000
    assert to_micros(Decimal("3.06")) == 3_060_000
    assert Money.of("0.1", "USD") + Money.of("0.2", "USD") == Money.of("0.3", "USD")
    with pytest.raises(ValueError, match="six decimal places"):
        to_micros("0.0000001")


def test_money_refuses_mixing_currencies() -> None:
    with pytest.raises(CurrencyError, match="exchange rate"):
        Money.of("1", "USD") + Money.of("1", "EUR")
    with pytest.raises(CurrencyError):
        _ = Money.of("1", "USD") < Money.of("2", "CHF")


def test_currency_codes_and_display() -> None:
    assert check_currency("CHF") == "CHF"
    with pytest.raises(CurrencyError, match="upper case"):
        check_currency("eur")
    with pytest.raises(CurrencyError, match="unknown ISO 4217"):
        check_currency("EURO")
    assert str(Money.of("12.405", "EUR")) == "12.40 EUR"  # half-even
    assert str(Money.of("1500", "JPY")) == "1500 JPY"
    assert str(Money.of("1.2345", "KWD")) == "1.234 KWD"


@given(st.lists(st.integers(min_value=-(10**12), max_value=10**12), max_size=50))
def test_money_sums_are_exact(amounts: list[int]) -> None:
    total = Money.zero("USD")
    for a in amounts:
        total += Money(a, "USD")
    assert total.micros == sum(amounts)


@given(
    st.integers(-(10**12), 10**12),
    st.decimals(min_value=Decimal("0.0001"), max_value=Decimal(1000), places=4),
)
def test_the_most_a_budget_may_be_asked_converts_to_no_more_than_is_left(
    left_micros: int, rate: Decimal
) -> None:
    """Rates.most_usd: the plan compares what a workload asks with it as an integer, for the
    conversion rounded up and compared as money."""
    rates = Rates({"CHF": rate})
    left = Money(left_micros, "CHF")
    most = rates.most_usd(left)
    assert most >= -1
    if most >= 0:
        assert rates.from_usd(most, "CHF") <= left
    assert rates.from_usd(most + 1, "CHF") > left
