"""Workload controllers Railyard places pods for (JobSet, LeaderWorkerSet), built at the versions
hack/versions.env pins and run as processes beside the local rig, their webhooks registered as their own manifests
register them but pointed at this host: what the e2e tests (tests/e2e/test_workloads.py) and the adopted-workloads
benchmark (bench/peers/compare.py, peer `railyard-jobset`) start. Also the serving certificates they use, made as
the chart makes its own (helm's genCA)."""

from __future__ import annotations

import base64
import contextlib
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from railyard.operator.kube.client import KubeApi

from bench.common import HACK, cluster, wait
from bench.launcher import free_port

CERTS = """\
{{- $ca := genCA "railyard-e2e-ca" 1 }}
{{- $cert := genSignedCert "127.0.0.1" (list "127.0.0.1") nil 1 $ca }}
ca: {{ $ca.Cert | b64enc }}
crt: {{ $cert.Cert | b64enc }}
key: {{ $cert.Key | b64enc }}
"""
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def certs(directory: Path) -> dict[str, Path]:
    """A CA and a serving certificate for 127.0.0.1: {ca, crt, key} PEM files in `directory`."""
    chart = directory / "certs"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: certs\nversion: 0.0.1\n")
    (chart / "templates" / "certs.yaml").write_text(CERTS)
    out = subprocess.run([str(cluster.binary("helm")), "template", "x", str(chart)], capture_output=True,
                         text=True, check=True).stdout
    paths = {}
    for key, value in yaml.safe_load(out).items():
        paths[key] = directory / f"{key}.pem"
        paths[key].write_bytes(base64.b64decode(value))
    return paths


def ca_bundle(ca: Path) -> str:
    return base64.b64encode(ca.read_bytes()).decode()


def webhook(name: str, url: str, ca: str, resource: str, operations: list[str], group: str = "",
            versions: tuple[str, ...] = ("v1",), selector: dict | None = None) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
        "timeoutSeconds": 10, "clientConfig": {"url": url, "caBundle": ca},
        "rules": [{"apiGroups": [group], "apiVersions": list(versions), "operations": operations,
                   "resources": [resource], "scope": "Namespaced"}]}
    if selector is not None:
        hook["objectSelector"] = selector
    return hook


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _kubectl(*args: str) -> None:
    done = subprocess.run([str(cluster.binary("kubectl")), "--kubeconfig", str(cluster.KUBECONFIG), *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")


def apply_crds(directory: Path, api: KubeApi) -> None:
    """Apply the CRDs in `directory` and wait until each is Established (`kubectl wait` errs, not waits, on a CRD
    whose status has no conditions yet)."""
    _kubectl("apply", "--server-side", "-f", str(directory))
    names = [yaml.safe_load(f.read_text())["metadata"]["name"] for f in sorted(directory.glob("*.yaml"))]

    def established(name: str) -> bool:
        crd = api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (crd.get("status") or {}).get("conditions") or [])

    wait(lambda: all(established(n) for n in names), 60, f"CRDs {', '.join(names)} established", interval=0.2)


# name -> (its Configuration's API group, its workload's group, version, resource, the label its pods carry,
# the pod operations its pod webhooks take)
KINDS = {
    "jobset": ("config.jobset.x-k8s.io", "jobset.x-k8s.io", "v1alpha2", "jobsets", "jobset.sigs.k8s.io/jobset-name",
               ["CREATE"]),
    "lws": ("config.lws.x-k8s.io", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
            "leaderworkerset.sigs.k8s.io/name", ["CREATE", "UPDATE"]),
}


@contextlib.contextmanager
def workload_controller(name: str, directory: Path, api: KubeApi | None = None) -> Iterator[Path]:
    """The controller `name` (a key of KINDS) built at its pinned version (hack/build-binaries.sh `name`), its
    CRDs applied and its four webhooks registered, pointed at this process. Yields its log file."""
    config_group, group, version, resource, pod_label, pod_operations = KINDS[name]
    api = api or KubeApi(workers=1, kubeconfig=str(cluster.KUBECONFIG))
    binary = cluster.binary(name)
    if not binary.exists():
        subprocess.run([str(HACK / "build-binaries.sh"), name], check=True)
    apply_crds(binary.parent / "crds", api)
    made = certs(directory)
    (directory / "serving").mkdir()
    (directory / "serving" / "tls.crt").write_bytes(made["crt"].read_bytes())
    (directory / "serving" / "tls.key").write_bytes(made["key"].read_bytes())
    port, health = free_port(), free_port()
    config = directory / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": f"{config_group}/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(directory / "serving")},
        "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}}))
    log = directory / f"{name}.log"
    proc = subprocess.Popen([str(binary), f"--kubeconfig={cluster.KUBECONFIG}", f"--config={config}",
                             "--leader-elect=false"], stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    base, ca = f"https://127.0.0.1:{port}", ca_bundle(made["ca"])
    path = f"{group.replace('.', '-')}-{version}-{resource[:-1]}"
    pods = {"matchExpressions": [{"key": pod_label, "operator": "Exists"}]}
    names = [f"e2e-{name}-{uuid.uuid4().hex[:6]}-{kind}" for kind in ("mutating", "validating")]
    api.request("POST", f"{ADMISSION}/mutatingwebhookconfigurations", {"metadata": {"name": names[0]}, "webhooks": [
        webhook(f"m{resource[:-1]}.kb.io", f"{base}/mutate-{path}", ca, resource, ["CREATE"], group, (version,)),
        webhook("mpod.kb.io", f"{base}/mutate--v1-pod", ca, "pods", pod_operations, selector=pods)]})
    api.request("POST", f"{ADMISSION}/validatingwebhookconfigurations", {"metadata": {"name": names[1]}, "webhooks": [
        webhook(f"v{resource[:-1]}.kb.io", f"{base}/validate-{path}", ca, resource, ["CREATE", "UPDATE"], group,
                (version,)),
        webhook("vpod.kb.io", f"{base}/validate--v1-pod", ca, "pods", pod_operations, selector=pods)]})
    try:
        wait(lambda: proc.poll() is None and _ready(f"http://127.0.0.1:{health}/readyz"), 120,
             f"the {name} controller ready", interval=0.2)
        yield log
    finally:
        for kind, hook in zip(("mutating", "validating"), names, strict=True):
            with contextlib.suppress(Exception):
                api.request("DELETE", f"{ADMISSION}/{kind}webhookconfigurations/{hook}")
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
