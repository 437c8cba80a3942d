"""Certificates for e2e tests' webhooks and TLS endpoints, made as the chart makes its own (helm's genCA), and the
rig's CA for the API server's client certificate towards webhooks."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import yaml

from tests.support.rig import load_hack_module, rig_binary

CERTS = """\
{{- $ca := genCA "railyard-e2e-ca" 1 }}
{{- $cert := genSignedCert "127.0.0.1" (list "127.0.0.1") nil 1 $ca }}
ca: {{ $ca.Cert | b64enc }}
crt: {{ $cert.Cert | b64enc }}
key: {{ $cert.Key | b64enc }}
"""


def certs(directory: Path) -> dict[str, Path]:
    """A CA and a serving certificate for 127.0.0.1: {ca, crt, key} PEM files in `directory`."""
    chart = directory / "certs"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: certs\nversion: 0.0.1\n")
    (chart / "templates" / "certs.yaml").write_text(CERTS)
    out = subprocess.run([str(rig_binary("helm")), "template", "x", str(chart)], capture_output=True, text=True,
                         check=True).stdout
    paths = {}
    for key, value in yaml.safe_load(out).items():
        paths[key] = directory / f"{key}.pem"
        paths[key].write_bytes(base64.b64decode(value))
    return paths


def ca_bundle(ca: Path) -> str:
    return base64.b64encode(ca.read_bytes()).decode()


def client_ca() -> dict[str, str]:
    """On the local rig the API server presents its client certificate to webhooks (hack/cluster.py's
    AdmissionConfiguration): the operator answers only that. A cluster given by opt-in may not: not set there."""
    if not os.environ.get("RAILYARD_LOCAL_RIG"):
        return {}
    pki = load_hack_module("cluster", "cluster.py").STATE / "pki"
    return {"RAILYARD_WEBHOOK_CLIENT_CA": str(pki / "ca.crt")}
