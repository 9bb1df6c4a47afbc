"""Money as integer micro-units of an ISO 4217 currency; never floats.

Every price, estimate, budget and ledger row in burst is a Money. Adding or comparing two amounts
of different currencies is an error: converting needs an explicit rate, which only the ledger and
the reports apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

MICROS = 1_000_000

# Active ISO 4217 codes (funds and precious-metal/testing codes X** other than currencies left out).
_CODES = """
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP
BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR
FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES
KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR
MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF
SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS
UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG
""".split()
# Minor-unit exponents that differ from 2, for display only: amounts are kept in micro-units.
_EXPONENTS = {
    **dict.fromkeys(
        "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split(), 0
    ),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
    **dict.fromkeys("CLF UYW".split(), 4),
}
CURRENCIES = frozenset(_CODES)
_AMOUNT = re.compile(r"-?\d+(\.\d+)?")


class CurrencyError(ValueError):
    pass


def check_currency(code: str) -> str:
    if code not in CURRENCIES:
        hint = " (codes are upper case)" if code.upper() in CURRENCIES else ""
        raise CurrencyError(f"unknown ISO 4217 currency {code!r}{hint}")
    return code


def to_micros(amount: str | Decimal | int) -> int:
    """Exact conversion of a decimal amount to micro-units; more than six decimals is an error."""
    if isinstance(amount, str):
        if not _AMOUNT.fullmatch(amount.strip()):
            raise ValueError(f"bad amount {amount!r}: expected a decimal number such as 12.40")
        amount = Decimal(amount.strip())
    try:
        scaled = Decimal(amount) * MICROS
    except InvalidOperation as exc:
        raise ValueError(f"bad amount {amount}") from exc
    if not scaled.is_finite() or scaled != scaled.to_integral_value():
        raise ValueError(f"bad amount {amount}: at most six decimal places")
    return int(scaled)


@dataclass(frozen=True, slots=True)
class Money:
    micros: int
    currency: str

    @classmethod
    def of(cls, amount: str | Decimal | int, currency: str) -> Money:
        return cls(to_micros(amount), check_currency(currency))

    @classmethod
    def zero(cls, currency: str) -> Money:
        return cls(0, currency)

    def _same(self, other: Money) -> None:
        if self.currency != other.currency:
            raise CurrencyError(
                f"cannot combine {self.currency} and {other.currency} without an exchange rate"
            )

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.micros + other.micros, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.micros - other.micros, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.micros, self.currency)

    def __lt__(self, other: Money) -> bool:
        self._same(other)
        return self.micros < other.micros

    def __le__(self, other: Money) -> bool:
        self._same(other)
        return self.micros <= other.micros

    def __gt__(self, other: Money) -> bool:
        self._same(other)
        return self.micros > other.micros

    def __ge__(self, other: Money) -> bool:
        self._same(other)
        return self.micros >= other.micros

    def times(self, factor: int) -> Money:
        return Money(self.micros * factor, self.currency)

    def to_decimal(self) -> Decimal:
        return Decimal(self.micros) / MICROS

    @classmethod
    def parse(cls, text: str) -> Money:
        """Read the JSON form, `"12.40 USD"`: a decimal amount, a space, an ISO 4217 code."""
        amount, _, currency = text.strip().partition(" ")
        if not currency:
            raise ValueError(
                f"bad money {text!r}: expected an amount and a currency, e.g. '12.40 USD'"
            )
        return cls.of(amount, currency.strip())

    def json(self) -> str:
        """The exact JSON form (all six decimals kept where they matter)."""
        return f"{self.to_decimal().normalize():f} {self.currency}"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_plain_validator_function(
            lambda v: v if isinstance(v, Money) else cls.parse(v),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda m: m.json()),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: Any, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": r"^-?\d+(\.\d{1,6})? [A-Z]{3}$",
            "examples": ["12.40 USD"],
        }

    def __str__(self) -> str:
        places = _EXPONENTS.get(self.currency, 2)
        shown = self.to_decimal().quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
        return f"{shown} {self.currency}"
