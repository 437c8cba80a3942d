"""Rail alignment policies. (Tiers are levels of the cluster's topology: levels.py.)"""

from __future__ import annotations

from enum import StrEnum


class RailAlignment(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"
    NONE = "none"
