"""Operator settings for tests, by the names admins know: `settings(starvation_seconds=60, spares_per_tor=1)` sets
RAILYARD_STARVATION_SECONDS and RAILYARD_SPARES_PER_TOR (base/settings.Settings.of), typed as given.

Unlike the operator's default, a released gang's Placed=Released is written at the release itself
(release_record_seconds=0): tests read it right after the pass that released it. The deferred record (with
Running, one write fewer) has its own tests, which ask for it (tests/unit/test_release_record.py)."""

from __future__ import annotations

from typing import Any

from railyard.operator.base.settings import Settings


def settings(**values: Any) -> Settings:
    values.setdefault("release_record_seconds", 0.0)
    return Settings.of({f"RAILYARD_{name.upper()}": value for name, value in values.items()})
