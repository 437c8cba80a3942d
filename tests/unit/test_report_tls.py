"""The report endpoint over HTTPS with certificates the way the chart makes them (helm's genCA and
genSignedCert, from the rig's helm): railyard.worker trusts exactly the CA the operator gives it
(RAILYARD_REPORT_CA), and refuses an endpoint signed by any other."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from railyard.operator.base.settings import ReportSettings
from railyard.operator.cache.progress_book import ProgressBook
from railyard.operator.kube.report_server import ReportServer
from railyard.worker import Reporter, context

from tests.support.rig import rig_binary
from tests.unit.test_report_server import Reviewer, _state

TEMPLATE = """\
{{- $ca := genCA "railyard-reports-ca" 1 }}
{{- $other := genCA "someone-else" 1 }}
{{- $cert := genSignedCert "localhost" nil (list "localhost") 1 $ca }}
{{- $apica := genCA "apiserver-webhook-client-ca" 1 }}
{{- $apiserver := genSignedCert "kube-apiserver" nil nil 1 $apica }}
{{- $forger := genSignedCert "kube-apiserver" nil nil 1 $other }}
apica: {{ $apica.Cert | b64enc }}
apiservercrt: {{ $apiserver.Cert | b64enc }}
apiserverkey: {{ $apiserver.Key | b64enc }}
forgercrt: {{ $forger.Cert | b64enc }}
forgerkey: {{ $forger.Key | b64enc }}
ca: {{ $ca.Cert | b64enc }}
other: {{ $other.Cert | b64enc }}
crt: {{ $cert.Cert | b64enc }}
key: {{ $cert.Key | b64enc }}
"""


@pytest.fixture(scope="module")
def pems(tmp_path_factory) -> dict[str, str]:
    chart = tmp_path_factory.mktemp("certs")
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: certs\nversion: 0.0.1\n")
    (chart / "templates").mkdir()
    (chart / "templates" / "certs.yaml").write_text(TEMPLATE)
    out = subprocess.run([str(rig_binary("helm")), "template", "x", str(chart)], capture_output=True, text=True,
                         check=True).stdout
    return {k: base64.b64decode(v).decode() for k, v in yaml.safe_load(out).items()}


def _serve(tmp_path: Path, pems: dict[str, str], webhook_client_ca: str = "") -> ReportServer:
    (tmp_path / "tls.crt").write_text(pems["crt"])
    (tmp_path / "tls.key").write_text(pems["key"])
    server = ReportServer(_state(), ProgressBook(), Reviewer(), ReportSettings(
        port=0, tls_cert=str(tmp_path / "tls.crt"), tls_key=str(tmp_path / "tls.key"),
        webhook_client_ca=webhook_client_ca), lambda: True)
    assert server.start(ephemeral=True)
    return server


def _reporter(tmp_path: Path, port: int, ca: str) -> Reporter:
    (tmp_path / "token").write_text("good-llm.p0-0")
    return Reporter(context({"RAILYARD_REPORT_URL": f"https://localhost:{port}/v1/reports",
                             "RAILYARD_TOKEN_FILE": str(tmp_path / "token"), "RAILYARD_REPORT_CA": ca,
                             "RAILYARD_NAMESPACE": "ml", "RAILYARD_JOB_NAME": "llm", "RAILYARD_RANK": "0"}),
                    min_interval=0, timeout=5, background=False)


def test_the_worker_reports_over_https_trusting_the_ca_it_was_given(tmp_path, pems):
    server = _serve(tmp_path, pems)
    try:
        assert server.http is not None
        assert _reporter(tmp_path, server.http.port, pems["ca"]).progress(1)
        assert 0 in server.book.jobs[("ml", "llm")].ranks
    finally:
        server.stop()


def test_the_worker_refuses_an_endpoint_signed_by_another_ca(tmp_path, pems):
    server = _serve(tmp_path, pems)
    try:
        assert server.http is not None
        assert not _reporter(tmp_path, server.http.port, pems["other"]).progress(1)
        assert ("ml", "llm") not in server.book.jobs, "the token went to an endpoint it could not verify"
    finally:
        server.stop()


def _review_as(tmp_path: Path, port: int, pems: dict[str, str], who: str | None) -> int | str:
    """POST an AdmissionReview to the webhook path, presenting `who`'s client certificate (None: none)."""
    import http.client
    import json
    import ssl

    context = ssl.create_default_context(cadata=pems["ca"])
    if who is not None:
        (tmp_path / f"{who}.crt").write_text(pems[f"{who}crt"])
        (tmp_path / f"{who}.key").write_text(pems[f"{who}key"])
        context.load_cert_chain(str(tmp_path / f"{who}.crt"), str(tmp_path / f"{who}.key"))
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "r-1", "namespace": "ml", "name": "llm.p0-0", "subResource": "eviction"}}
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=5)
    try:
        connection.request("POST", "/v1/evictions", json.dumps(review), {"Content-Type": "application/json"})
        return connection.getresponse().status
    except (ssl.SSLError, ConnectionError) as e:
        return type(e).__name__
    finally:
        connection.close()


def test_with_a_client_ca_the_webhook_answers_the_api_server_only(tmp_path, pems):
    """A pod forging an AdmissionReview (to make another tenant's gang move) is refused: only a peer presenting
    the API server's client certificate is answered; reports (bearer tokens, no certificate) go on."""
    (tmp_path / "apica.crt").write_text(pems["apica"])
    server = _serve(tmp_path, pems, webhook_client_ca=str(tmp_path / "apica.crt"))
    try:
        assert server.http is not None
        port = server.http.port
        assert _review_as(tmp_path, port, pems, None) == 403, "no certificate: refused"
        assert _review_as(tmp_path, port, pems, "forger") != 200, "a certificate another CA signed: refused"
        assert not server.evictions.requested("ml", time.monotonic()), "nothing forged was noted"
        assert _review_as(tmp_path, port, pems, "apiserver") == 200
        assert server.evictions.requested("ml", time.monotonic()) == {"llm.p0-0"}
        assert _reporter(tmp_path, port, pems["ca"]).progress(1), "reports need no client certificate"
    finally:
        server.stop()
