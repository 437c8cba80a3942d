"""Network tiers, bottom (node) to top (spine)."""

from __future__ import annotations

from enum import StrEnum


class Tier(StrEnum):
    NODE = "node"
    TOR = "tor"
    LEAF = "leaf"
    SPINE = "spine"

    @property
    def level(self) -> int:
        return TIER_ORDER.index(self)


# Bottom to top; a tier's level is its index here.
TIER_ORDER: tuple[Tier, ...] = (Tier.NODE, Tier.TOR, Tier.LEAF, Tier.SPINE)


class RailAlignment(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"
    NONE = "none"
