"""Unit tests read a gang's Placed=Released right after the pass that released it: the operator writes
it at the release there (RAILYARD_RELEASE_RECORD_SECONDS=0). The deferred record (with Running, one
write fewer) has its own tests, which ask for it (tests/unit/test_release_record.py); e2e tests run
the default. Set per test, so operators the e2e tests start in the same session never see it."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def release_recorded_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAILYARD_RELEASE_RECORD_SECONDS", "0")
