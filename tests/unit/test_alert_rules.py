"""The alert rules: valid for promtool, each alert fires and stays quiet as its promtool unit test
says, and each carries what an on-call engineer needs (severity, for, summary, description, a runbook
section that exists)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "charts" / "railyard" / "files" / "railyard-alerts.yaml"
RUNBOOKS = REPO / "docs" / "runbooks.md"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: hack/deps.sh installs Debian's prometheus package"
    return found


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_rules():
    run = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_passes_its_promtool_unit_tests():
    run = subprocess.run([promtool(), "test", "rules", "alerts_test.yaml"], cwd=Path(__file__).parent,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    tested = set(re.findall(r"alertname: (\w+)", (Path(__file__).parent / "alerts_test.yaml").read_text()))
    assert {a["alert"] for a in alerts()} <= tested, "an alert without a promtool unit test"


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_alert_has_severity_duration_text_and_a_runbook(alert):
    assert alert["labels"]["severity"] in ("critical", "warning", "info")
    assert "for" in alert
    for key in ("summary", "description", "runbook_url"):
        assert alert["annotations"].get(key), f"{alert['alert']}: no {key}"
    anchor = alert["annotations"]["runbook_url"].split("#", 1)[1]
    headings = {h.strip().lower() for h in re.findall(r"^## (.+)$", RUNBOOKS.read_text(), re.M)}
    assert anchor in headings, f"{alert['alert']}: docs/runbooks.md has no section #{anchor}"
