"""Certificates for e2e tests' webhooks and TLS endpoints, made as the chart makes its own (helm's genCA), and the
rig's CA for the API server's client certificate towards webhooks."""

from __future__ import annotations

import os

from bench.controllers import ca_bundle, certs

from tests.support.rig import load_hack_module

__all__ = ["ca_bundle", "certs", "client_ca"]


def client_ca() -> dict[str, str]:
    """On the local rig the API server presents its client certificate to webhooks (hack/cluster.py's
    AdmissionConfiguration): the operator answers only that. A cluster given by opt-in may not: not set there."""
    if not os.environ.get("RAILYARD_LOCAL_RIG"):
        return {}
    pki = load_hack_module("cluster", "cluster.py").STATE / "pki"
    return {"RAILYARD_WEBHOOK_CLIENT_CA": str(pki / "ca.crt")}
