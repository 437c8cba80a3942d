"""Kubernetes resource quantities: whole device counts, and any quantity in milli-units."""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
_ALL_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
    "E": Decimal(10**18), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_BY_LENGTH = sorted(_ALL_SUFFIXES, key=len, reverse=True)
# The largest milli-value an int64 holds: the solver's arrays and kube-scheduler's own arithmetic are int64,
# so a larger quantity can never be placed (and would overflow them).
MAX_MILLI = 2**63 - 1


def parse_count(raw: Any) -> int:
    """A whole-number quantity such as 8, "8" or "1k". Raises ValueError for anything else."""
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a count")
    if isinstance(raw, int):
        return raw
    text = str(raw).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            number = text[: -len(suffix)]
            break
    else:
        suffix, number = "", text
    if not number.isdigit():
        raise ValueError(f"{raw!r} is not a whole number of devices")
    return int(number) * _SUFFIX[suffix]


def parse_milli(raw: Any) -> int:
    """Any quantity ("500m", "1.5", "64Gi", "1e3", 2) in milli-units, rounded up as the API server does.
    Raises ValueError naming the value."""
    try:
        return _parsed_milli(raw)  # pods share few distinct quantities: each is parsed once
    except TypeError:  # unhashable (a malformed spec's list or map): parsed to say what is wrong with it
        return _parse_milli(raw)


@lru_cache(maxsize=4096, typed=True)
def _parsed_milli(raw: Any) -> int:
    return _parse_milli(raw)


def _parse_milli(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a quantity")
    if isinstance(raw, int | float):
        number = Decimal(str(raw))
    else:
        text = str(raw).strip()
        scale = Decimal(1)
        if "e" in text.lower() and not text.endswith(("Ei", "E")):
            body = text
        else:
            body = text
            for suffix in _BY_LENGTH:
                if suffix and text.endswith(suffix):
                    body, scale = text[: -len(suffix)], _ALL_SUFFIXES[suffix]
                    break
        try:
            number = Decimal(body) * scale
        except InvalidOperation:
            raise ValueError(f"{raw!r} is not a Kubernetes quantity") from None
    if not number.is_finite() or number < 0:
        raise ValueError(f"{raw!r} is not a non-negative quantity")
    milli = int((number * 1000).to_integral_value(rounding=ROUND_CEILING))
    if milli > MAX_MILLI:
        raise ValueError(f"{raw!r} is too large a quantity (at most {MAX_MILLI // 1000} units)")
    return milli
