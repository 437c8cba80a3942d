"""A real Prometheus (Debian's package) scrapes a real operator with the chart's alert rules; when the
operator stops, RailyardOperatorDown fires. The only change to the rule file: `for:` durations are
shortened to 2 s so the test runs in seconds."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import requests

from tests.support.identity import REPO
from tests.support.operator import OperatorProcess, free_port, wait_for_leader
from tests.support.poll import poll

pytestmark = pytest.mark.e2e
RULES = REPO / "charts" / "railyard" / "files" / "railyard-alerts.yaml"


def query(port: int, promql: str) -> list[dict]:
    r = requests.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": promql}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


def alert_state(port: int, name: str) -> str | None:
    r = requests.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5)
    r.raise_for_status()
    return next((a["state"] for a in r.json()["data"]["alerts"] if a["labels"]["alertname"] == name), None)


def test_prometheus_fires_operator_down_when_the_scraped_operator_stops(
        identity, crds, coordination, lease_namespace, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: hack/deps.sh installs Debian's prometheus package"
    operator = OperatorProcess(identity, lease_namespace, tmp_path, name="scraped")
    rules = tmp_path / "rules.yaml"
    rules.write_text(re.sub(r"^(\s+for:) \S+$", r"\1 2s", RULES.read_text(), flags=re.M))
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{rules}]
scrape_configs:
  - job_name: railyard
    static_configs: [{{targets: ["127.0.0.1:{operator.metrics_port}"]}}]
""")
    port = free_port()
    prometheus = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))  # noqa: SIM115
    try:
        wait_for_leader(coordination, lease_namespace)
        poll(lambda: query(port, 'railyard_is_leader{job="railyard"} == 1'), 60, "the operator scraped as leader")
        # (it may have fired during the operator's start-up, before its metrics server answered)
        poll(lambda: alert_state(port, "RailyardOperatorDown") is None, 30, "RailyardOperatorDown resolved")
        operator.stop()
        poll(lambda: alert_state(port, "RailyardOperatorDown") == "firing", 60, "RailyardOperatorDown firing")
    finally:
        operator.stop()
        prometheus.terminate()
        prometheus.wait(timeout=30)
