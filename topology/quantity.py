"""Kubernetes resource quantities, just enough for device counts."""

from __future__ import annotations

from typing import Any

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


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
