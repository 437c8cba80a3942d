#!/usr/bin/env python3
"""The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.

    hack/cluster.py up [--profile small]   start everything (no-op when running), create kwok GPU nodes
                  [--own]                 reuse a running rig only if this command (--started-by) started it
                                          with this profile alone; otherwise stop it and start afresh
                  [--real-node]           also a real kubelet node (root)
                  [--dra]                 ResourceSlices for the kwok nodes (hack/dra_slices.py)
    hack/cluster.py down                   stop exactly the processes `up` started, remove state
    hack/cluster.py status                 component health
    hack/cluster.py nodes                  the simulated GPU nodes and their topology
    hack/cluster.py create-nodes PROFILE   add a profile's nodes to the running cluster
    hack/cluster.py kubeconfig             print the kubeconfig path
    hack/cluster.py describe               what is running: the profiles its nodes came from, who started it

Binaries come from hack/build-binaries.sh (versions pinned in hack/versions.env); state lives in
$RAILYARD_CACHE/cluster (default ~/.cache/railyard/cluster), never in the repo.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HACK = Path(__file__).resolve().parent
REPO = HACK.parent
CACHE = Path(os.environ.get("RAILYARD_CACHE", Path.home() / ".cache" / "railyard"))
STATE = Path(os.environ.get("RAILYARD_CLUSTER_DIR", CACHE / "cluster"))
KUBECONFIG = STATE / "kubeconfig"
AUDIT_LOG = STATE / "audit.log"  # write requests only (see write_configs)
RIG_RECORD = STATE / "rig.json"  # which profiles' nodes the rig holds and which tool started it

PORTS = {"etcd": 23790, "etcd-peer": 23800, "kube-apiserver": 16443, "kube-controller-manager": 17257,
         "kube-scheduler": 17259, "kwok": 17247}
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.128.0.0/12"  # kwok hands out fake pod IPs from here; nothing routes to them
KWOK_LABEL = "type=kwok"  # nodes kwok simulates; railyard.topology.planner.profile.KWOK_LABEL
REAL_NODE_IP = "10.88.0.1"  # the real node's bridge (hack/realnode.py)


class RigError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (HACK / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


def binary(component: str) -> Path:
    v = versions()
    where = {
        "etcd": CACHE / "bin" / f"etcd-{v['ETCD_VERSION']}" / "etcd",
        "kueue": CACHE / "bin" / f"kueue-{v['KUEUE_VERSION']}" / "kueue",
        "jobset": CACHE / "bin" / f"jobset-{v['JOBSET_VERSION']}" / "jobset",
        "lws": CACHE / "bin" / f"lws-{v['LWS_VERSION']}" / "lws",
        "trainer": CACHE / "bin" / f"trainer-{v['TRAINER_VERSION']}" / "trainer",
        "kwok": CACHE / "bin" / f"kwok-{v['KWOK_VERSION']}" / "kwok",
        "helm": CACHE / "bin" / f"helm-{v['HELM_VERSION']}" / "helm",
        "vc-scheduler": CACHE / "bin" / f"volcano-{v['VOLCANO_VERSION']}" / "vc-scheduler",
        "vc-controller-manager": CACHE / "bin" / f"volcano-{v['VOLCANO_VERSION']}" / "vc-controller-manager",
        "coredns": CACHE / "bin" / f"coredns-{v['COREDNS_VERSION']}" / "coredns",
    }
    if component in ("kubelet", "kube-proxy", "pause"):
        return CACHE / "bin" / f"kubernetes-node-{v['KUBERNETES_VERSION']}" / component
    k8s = CACHE / "bin" / f"kubernetes-{v['KUBERNETES_VERSION']}"
    return where.get(component, k8s / component)


def ensure_binaries() -> None:
    missing = [c for c in ("etcd", "kwok", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
               if not binary(c).exists()]
    if not (binary("kwok").parent / "stages").is_dir():
        missing.append("kwok stages")
    if missing:
        log(f"building missing binaries: {', '.join(missing)}")
        subprocess.run([str(HACK / "build-binaries.sh")], check=True)


# --- certificates -------------------------------------------------------------------------------

def _openssl(*args: str) -> None:
    try:
        subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise RigError("openssl is required to create the cluster's certificates (apt-get install openssl)") from None
    except subprocess.CalledProcessError as e:
        raise RigError(f"openssl {' '.join(args[:2])} failed: {e.stderr.strip()}") from None


def issue_cert(pki: Path, name: str, subject: str, extensions: str) -> None:
    """<name>.crt/.key in `pki`, signed by the rig's CA there."""
    p = lambda n: str(pki / n)  # noqa: E731
    ext = pki / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", p(f"{name}.key"), "-out", p(f"{name}.csr"),
             "-subj", subject)
    _openssl("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
             "-CAcreateserial", "-out", p(f"{name}.crt"), "-days", "3650", "-extfile", str(ext))


def make_pki(pki: Path) -> None:
    if (pki / "admin.crt").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    p = lambda name: str(pki / name)  # noqa: E731
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("ca.key"), "-out", p("ca.crt"),
             "-days", "3650", "-subj", "/CN=railyard-local-ca")

    def issue(name: str, subject: str, extensions: str) -> None:
        issue_cert(pki, name, subject, extensions)

    issue("apiserver", "/CN=kube-apiserver",
          f"subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:{REAL_NODE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
          "DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n")
    issue("admin", "/O=system:masters/CN=railyard-admin", "extendedKeyUsage=clientAuth\n")
    # The API server's client certificate towards kubelets (logs, exec, port-forward on a real node).
    issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
          "extendedKeyUsage=clientAuth\n")
    _openssl("genrsa", "-out", p("sa.key"), "2048")
    _openssl("rsa", "-in", p("sa.key"), "-pubout", "-out", p("sa.pub"))


def make_webhook_client_cert(pki: Path) -> None:
    """The API server's client certificate towards admission webhooks (a rig made before it existed gets it
    now): webhooks can then tell the API server from a pod (RAILYARD_WEBHOOK_CLIENT_CA)."""
    if not (pki / "apiserver-webhook-client.crt").exists():
        issue_cert(pki, "apiserver-webhook-client", "/CN=kube-apiserver-webhook-client",
                   "extendedKeyUsage=clientAuth\n")


def write_client_kubeconfig(path: Path, cert: Path, key: Path) -> None:
    """A kubeconfig for the rig's API server with this client certificate (a kubelet's, kube-proxy's)."""
    pki = STATE / "pki"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: railyard-local
  cluster:
    server: https://127.0.0.1:{PORTS['kube-apiserver']}
    certificate-authority: {pki / 'ca.crt'}
users:
- name: client
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: railyard-local
  context: {{cluster: railyard-local, user: client}}
current-context: railyard-local
""")


def write_kubeconfig(pki: Path) -> None:
    server = f"https://127.0.0.1:{PORTS['kube-apiserver']}"
    KUBECONFIG.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: railyard-local
  cluster:
    server: {server}
    certificate-authority: {pki / 'ca.crt'}
users:
- name: railyard-admin
  user:
    client-certificate: {pki / 'admin.crt'}
    client-key: {pki / 'admin.key'}
contexts:
- name: railyard-local
  context:
    cluster: railyard-local
    user: railyard-admin
current-context: railyard-local
""")


# --- processes ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Component:
    name: str
    args: list[str]
    health: Callable[[], bool]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _https_ok(url: str, client_cert: bool = False) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if client_cert:
        pki = STATE / "pki"
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


# Opt-in Kubernetes feature gates, per component (`up --k8s-gates NAME`); the default cluster has none.
_WORKLOAD = "--feature-gates=GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"
K8S_GATES: dict[str, dict[str, list[str]]] = {
    # kube-scheduler 1.36's gang + topology-aware workload scheduling (PodGroup, v1alpha2): a peer.
    "workload": {
        "kube-apiserver": [_WORKLOAD, "--runtime-config=scheduling.k8s.io/v1alpha2=true"],
        "kube-scheduler": [_WORKLOAD],
        "kube-controller-manager": ["--feature-gates=GenericWorkload=true"],
    },
}


def _real_node() -> bool:
    return (STATE / "real-node").exists()


def _gates() -> dict[str, list[str]]:
    name = (STATE / "k8s-gates").read_text().strip() if (STATE / "k8s-gates").exists() else ""
    return K8S_GATES.get(name, {})


def components() -> list[Component]:
    gates = _gates()
    comps = _components()
    return [Component(c.name, c.args + gates.get(c.name, []), c.health) for c in comps]


# Profiles with more nodes than this get a slow node lifecycle: kwok renewing 12,288 leases every 10 s
# (lease 40 s) is more than 2 cores keep up with — nodes went NotReady faster than they turned Ready.
# A 600 s lease (renewed every 150 s) and a 900 s grace; fault tests run on small profiles only.
SCALE_NODES = 4096
# kube-controller-manager's node monitor per lifecycle. "fast": fault tests see NotReady within seconds.
# "upstream": Kubernetes' defaults — throughput benchmarks saturate both cores, kwok's lease renewals then
# lag past 20 s, and the node lifecycle controller's NotReady marks (a status update and an Event per pod,
# kwok's re-patches) would be counted as the scheduler's requests. "scale": see SCALE_NODES.
NODE_MONITOR = {"fast": ["--node-monitor-period=2s", "--node-monitor-grace-period=20s"], "upstream": [],
                "scale": ["--node-monitor-period=10s", "--node-monitor-grace-period=900s"]}


def _components() -> list[Component]:
    lifecycle = (STATE / "lifecycle").read_text().strip() if (STATE / "lifecycle").exists() else "fast"
    scale = lifecycle == "scale"
    pki = STATE / "pki"
    kc = str(KUBECONFIG)
    etcd_url = f"http://127.0.0.1:{PORTS['etcd']}"
    peer_url = f"http://127.0.0.1:{PORTS['etcd-peer']}"
    sched_config = STATE / "kube-scheduler.yaml"
    return [
        Component("etcd", [
            str(binary("etcd")), "--name=rig", f"--data-dir={STATE / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=rig={peer_url}", "--quota-backend-bytes=8589934592",
            # A disposable test store: skip fsync so 20k-object runs are not disk-bound.
            "--unsafe-no-fsync=true", "--log-level=warn",
        ], lambda: _http_ok(f"{etcd_url}/health")),
        Component("kube-apiserver", [
            str(binary("kube-apiserver")), f"--etcd-servers={etcd_url}",
            # With a real node, pods reach the API server through the `kubernetes` Service, whose endpoint
            # is the advertise address: the node's bridge (pods cannot be routed to 127.0.0.1).
            f"--bind-address={'0.0.0.0' if _real_node() else '127.0.0.1'}",
            f"--advertise-address={REAL_NODE_IP if _real_node() else '127.0.0.1'}",
            f"--secure-port={PORTS['kube-apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=Node,RBAC",
            # As production clusters run it: owning an object with blockOwnerDeletion needs update on
            # the owner's finalizers (the chart grants trainingjobs/finalizers).
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            # A webhook named by its Service is called at the Service's endpoint (no kube-proxy on most rigs),
            # its certificate still checked against the Service's DNS name (Kubeflow Trainer's own cert manager).
            "--enable-aggregator-routing=true",
            f"--cert-dir={STATE / 'apiserver-certs'}", "--max-requests-inflight=1000",
            # A real node is reached by its InternalIP (its name resolves nowhere); harmless for kwok nodes.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--max-mutating-requests-inflight=500",
            # RAILYARD_RIG_PROFILING=1 serves /debug/pprof (CPU profiles of a benchmark's burst).
            f"--profiling={'true' if os.environ.get('RAILYARD_RIG_PROFILING') else 'false'}",
            # Writes are audited (metadata only) so tests can count what a client sent, and when.
            f"--audit-policy-file={STATE / 'audit-policy.yaml'}", f"--audit-log-path={AUDIT_LOG}",
            "--audit-log-maxsize=200", "--audit-log-maxbackup=1",
            # Webhooks see the API server's own client certificate (as an admin configures it).
            f"--admission-control-config-file={STATE / 'admission-config.yaml'}",
        ], lambda: _https_ok(f"https://127.0.0.1:{PORTS['kube-apiserver']}/readyz", client_cert=True)),
        Component("kube-controller-manager", [
            str(binary("kube-controller-manager")), f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={PORTS['kube-controller-manager']}",
            "--leader-elect=false", "--controllers=*", "--use-service-account-credentials=false",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            *NODE_MONITOR[lifecycle],
            "--kube-api-qps=500", "--kube-api-burst=1000", f"--cert-dir={STATE / 'kcm-certs'}",
        ], lambda: _https_ok(f"https://127.0.0.1:{PORTS['kube-controller-manager']}/healthz")),
        Component("kube-scheduler", [
            str(binary("kube-scheduler")), f"--config={sched_config}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={PORTS['kube-scheduler']}",
            f"--cert-dir={STATE / 'scheduler-certs'}",
        ], lambda: _https_ok(f"https://127.0.0.1:{PORTS['kube-scheduler']}/healthz")),
        Component("kwok", [
            str(binary("kwok")), f"--kubeconfig={kc}", "--manage-all-nodes=false",
            # A label (not annotation) selector: the watch filters server-side, so removing the label
            # makes kwok release the node and stop its heartbeat, which is how tests fail a node.
            f"--manage-nodes-with-label-selector={KWOK_LABEL}",
            f"--cidr={POD_CIDR}", "--node-ip=127.0.0.1", f"--node-lease-duration-seconds={600 if scale else 40}",
            f"--server-address=127.0.0.1:{PORTS['kwok']}", f"--config={STATE / 'kwok.yaml'}",
        ], lambda: _http_ok(f"http://127.0.0.1:{PORTS['kwok']}/healthz")),
    ]


def write_configs(keep_job_pods: bool = False) -> None:
    pki = STATE / "pki"
    (STATE / "webhook-kubeconfig.yaml").write_text(f"""apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: {pki / 'apiserver-webhook-client.crt'}
      client-key: {pki / 'apiserver-webhook-client.key'}
""")
    webhook = f"""    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: {STATE / 'webhook-kubeconfig.yaml'}
"""
    (STATE / "admission-config.yaml").write_text(f"""apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
{webhook}  - name: MutatingAdmissionWebhook
{webhook}""")
    (STATE / "audit-policy.yaml").write_text("""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    resources: [{group: "coordination.k8s.io", resources: [leases]}]
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
""")
    # The default client QPS (50) would cap binding far below what a 2k-node cluster needs.
    (STATE / "kube-scheduler.yaml").write_text(f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {KUBECONFIG}
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
""")
    # kwok's upstream stages (copied by the build) plus Railyard's own in hack/kwok-stages/; pod
    # deletion is Railyard's (railyard-termination.yaml: graceful for the pods that ask).
    stage_files = sorted(f for f in (binary("kwok").parent / "stages").glob("*.yaml") if f.name != "pod-delete.yaml")
    stage_files += sorted((HACK / "kwok-stages").glob("*.yaml"))
    if keep_job_pods:  # `make compare`: Job-owned pods run forever, like everyone else's
        stage_files = [f for f in stage_files if f.name != "pod-complete.yaml"]
    # Explicit parallelism: a config file bypasses kwok's defaults (zero leases workers fails start).
    documents = ["""apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: 16
  nodePlayStageParallelism: 16
  podPlayStageParallelism: 16
  podsOnNodeSyncParallelism: 4
"""]
    documents += [_opted_in_pods_run(f.read_text()) if f.name == "pod-complete.yaml" else f.read_text()
                  for f in stage_files]
    (STATE / "kwok.yaml").write_text("\n---\n".join(d.strip() + "\n" for d in documents))


def _opted_in_pods_run(stage: str) -> str:
    """kwok's pod-complete stage ends every Job-owned pod at once; the Job-owned pods Railyard places (the opt-in
    label, docs/workloads.md) run until deleted instead, as a training job's pods would."""
    anchor = "    - key: '.metadata.deletionTimestamp'\n"
    assert anchor in stage, "kwok's pod-complete stage changed: review _opted_in_pods_run"
    return stage.replace(anchor, "    - key: '.metadata.labels[\"railyard.dev/scheduling\"]'\n"
                                 "      operator: 'DoesNotExist'\n" + anchor, 1)


def _pid_file(name: str) -> Path:
    return STATE / "pids" / f"{name}.pid"


def _alive(pid: int, name: str) -> bool:
    """True if `pid` is still the component we started (pids get reused)."""
    try:
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return False
    if name == "railyard-operator":
        return any(Path(a).name == "railyard" for a in argv[:2]) and "operator" in argv
    return bool(argv) and Path(argv[0]).name == Path(str(binary(name))).name


def running() -> dict[str, int]:
    out: dict[str, int] = {}
    for comp in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "railyard-operator"):
        f = _pid_file(comp)
        if f.exists():
            pid = int(f.read_text().strip() or 0)
            if pid and _alive(pid, comp):
                out[comp] = pid
    return out


def _wait(check: Callable[[], bool], what: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise RigError(f"{what} exited with code {proc.returncode}:\n{_log_tail(what)}")
        time.sleep(0.2)
    raise RigError(f"{what} not healthy after {timeout:.0f}s:\n{_log_tail(what)}")


def _log_tail(name: str, lines: int = 15) -> str:
    """The end of a component's log, shown in errors because a failed `up` removes its state."""
    path = STATE / "logs" / f"{name}.log"
    if not path.exists():
        return "(no log)"
    return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-lines:])


def start(comp: Component) -> None:
    (STATE / "logs").mkdir(parents=True, exist_ok=True)
    (STATE / "pids").mkdir(parents=True, exist_ok=True)
    logfile = open(STATE / "logs" / f"{comp.name}.log", "ab")  # noqa: SIM115 - handed to the child
    t0 = time.monotonic()
    proc = subprocess.Popen(comp.args, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    _pid_file(comp.name).write_text(str(proc.pid))
    _wait(comp.health, comp.name, 120, proc)
    log(f"{comp.name} healthy in {time.monotonic() - t0:.1f}s (pid {proc.pid})")


def stop_all() -> list[str]:
    stopped = []
    # The demo's operator (if any) goes first, while the API server it talks to is still up.
    for comp in ["railyard-operator", *reversed(["etcd", "kube-apiserver", "kube-controller-manager",
                                                 "kube-scheduler", "kwok"])]:
        pid = running().get(comp)
        if pid is None:
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _alive(pid, comp) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid, comp):
            os.kill(pid, signal.SIGKILL)
        stopped.append(comp)
    return stopped


def rig_record() -> dict:
    """{"profiles": [...], "started_by": "..."} of the running rig ({} when none is recorded)."""
    try:
        return json.loads(RIG_RECORD.read_text())
    except (OSError, ValueError):
        return {}


def record_rig(profile: str | None = None, started_by: str | None = None) -> None:
    record = rig_record() or {"profiles": [], "started_by": started_by or "hack/cluster.py up"}
    if started_by:
        record["started_by"] = started_by
    if profile and profile not in record["profiles"]:
        record["profiles"].append(profile)
    RIG_RECORD.write_text(json.dumps(record))


def describe() -> str:
    if not running():
        return "no rig is running"
    record = rig_record()
    profiles = ", ".join(record.get("profiles") or []) or "no profile's nodes"
    real = "; a real node" if (STATE / "real-node").exists() else ""
    return f"a rig is running with {profiles}{real} (started by {record.get('started_by', 'unknown')})"


def up(profile: str | None, k8s_gates: str | None = None, keep_job_pods: bool = False,
       real_node: bool = False, own: bool = False, started_by: str | None = None,
       scale: bool = False, upstream_lifecycle: bool = False) -> None:
    """`scale`: the slow node lifecycle (SCALE_NODES) even without a profile (its nodes come later);
    `upstream_lifecycle`: Kubernetes' own node-monitor defaults instead of the fast one tests use."""
    if k8s_gates and k8s_gates not in K8S_GATES:
        raise RigError(f"unknown --k8s-gates {k8s_gates!r}; known: {', '.join(sorted(K8S_GATES))}")
    if profile:
        nodes = load_profile_nodes(profile)  # validate before starting anything
    state = {k: v for k, v in running().items() if k != "railyard-operator"}
    if len(state) == 5 and all(c.health() for c in components()):
        record = rig_record()
        if own and (record.get("profiles") != ([profile] if profile else [])
                    or record.get("started_by") != started_by or (STATE / "real-node").exists() != real_node):
            # Another command's rig (a compare run's 2,048 nodes, tests' tainted and relabelled nodes):
            # nothing of it is worth keeping, and reusing it would show its leftovers.
            log(f"{describe()}: stopping it for a rig of {started_by or 'this command'}'s own")
            down()
            up(profile, k8s_gates, keep_job_pods, real_node, own=False, started_by=started_by, scale=scale,
               upstream_lifecycle=upstream_lifecycle)
            return
        log(f"already running ({KUBECONFIG})")
        if profile:
            create_nodes(nodes)
            record_rig(profile)
        if real_node and not realnode().running():
            if not _real_node():
                raise RigError("the rig runs without a real node (its API server listens on 127.0.0.1 only); "
                               "run `hack/cluster.py down`, then `up --real-node`")
            realnode().up(node_images())
        return
    if state:
        raise RigError(f"a partial cluster is running ({', '.join(state)}); run `hack/cluster.py down` first")
    busy = [f"{name} port {port}" for name, port in PORTS.items() if not _port_free(port)]
    if busy:
        raise RigError(f"ports in use: {', '.join(busy)}; stop whatever holds them (or `hack/cluster.py down`)")
    ensure_binaries()
    t0 = time.monotonic()
    try:
        STATE.mkdir(parents=True, exist_ok=True)
        (STATE / "k8s-gates").write_text(k8s_gates or "")
        (STATE / "lifecycle").write_text("scale" if scale or (profile and len(nodes) > SCALE_NODES) else
                                         "upstream" if upstream_lifecycle else "fast")
        record_rig(started_by=started_by)
        if real_node:
            (STATE / "real-node").write_text("1")
            realnode().prepare()  # the bridge first: the API server advertises its address
        make_pki(STATE / "pki")
        make_webhook_client_cert(STATE / "pki")
        write_kubeconfig(STATE / "pki")
        write_configs(keep_job_pods)
        for comp in components():
            start(comp)
        wait_for_default_service_account()
        if profile:
            create_nodes(nodes)
            record_rig(profile)
        if real_node:
            realnode().up(node_images())
    except BaseException:
        log("start failed: stopping what was started and removing state")
        realnode().down()
        stop_all()
        _remove_state()
        raise
    log(f"up in {time.monotonic() - t0:.1f}s; export KUBECONFIG={KUBECONFIG}")


def _remove_state() -> None:
    subprocess.run(["rm", "-rf", str(STATE)], check=False)


def _dra_publisher():
    """hack/dra_slices.py (imported late: it imports this module)."""
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    import dra_slices

    return dra_slices


def realnode():
    """hack/realnode.py (imported late: it imports this module)."""
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    import realnode as module

    return module


def node_images() -> list[Path]:
    """The operator and trainer images for the real node (built, or taken from the cache)."""
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    import images

    return [images.build("operator"), images.build("trainer")]


def down() -> None:
    stopped = realnode().down()  # first: its pods are deleted through the API server
    stopped += stop_all()
    _remove_state()
    log(f"stopped {', '.join(stopped) if stopped else 'nothing (not running)'}; state removed")


# --- API access (the official client, loaded lazily so `down` works without the venv) ----------

def api():
    from kubernetes import client, config

    config.load_kube_config(str(KUBECONFIG))
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    return client.ApiClient(cfg)


def core_api():
    from kubernetes import client

    return client.CoreV1Api(api())


def wait_for_default_service_account() -> None:
    from kubernetes import client

    core = client.CoreV1Api(api())

    def ready() -> bool:
        try:
            core.read_namespaced_service_account("default", "default")
            return True
        except Exception:
            return False

    _wait(ready, "default service account", 60)


def load_profile_nodes(profile: str) -> list[dict]:
    import yaml
    from pydantic import ValidationError
    from railyard.topology.planner.profile import ClusterProfile, node_objects

    path = Path(profile)
    if not path.exists():
        path = REPO / "examples" / "clusters" / f"{profile}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in (REPO / "examples" / "clusters").glob("*.yaml")))
        raise RigError(f"profile {profile!r}: no such file or example (known: {known})")
    try:
        data = yaml.safe_load(path.read_text())
        return node_objects(ClusterProfile.model_validate(data))
    except yaml.YAMLError as e:
        raise RigError(f"{path}: not valid YAML: {e}") from None
    except ValidationError as e:
        errors = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']} (got {err.get('input')!r})" for err in e.errors()
        )
        raise RigError(f"{path}: invalid cluster profile: {errors}") from None


def create_idempotent(create: Callable[[], object]) -> None:
    """Run one create call: an object that already exists is fine; 429 and 5xx are retried (4 times)."""
    from kubernetes.client.rest import ApiException

    for attempt in range(5):
        try:
            create()
            return
        except ApiException as e:
            if e.status == 409:
                return
            if e.status in (429, 500, 503) and attempt < 4:
                time.sleep(0.5 * (attempt + 1))
                continue
            raise


# The node lifecycle's NoSchedule taints: the API server's TaintNodesByCondition admission puts the
# first on every new node, and kube-controller-manager removes it once it sees the node Ready (~1,000
# nodes a minute on the loaded 2-core rig); the second marks a node whose heartbeats stopped.
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def node_usable(node: dict) -> bool:
    """Ready and without a lifecycle taint: a pod may go there. A scale bench that placed gangs on a
    12,288-node rig before the taints left spread a 128-node gang over 20 TORs (4 would do)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or []) and not any(
        t.get("key") in LIFECYCLE_TAINTS for t in (node.get("spec") or {}).get("taints") or [])


def create_nodes(nodes: list[dict]) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api())
    existing = {n.metadata.name for n in core.list_node().items if n.metadata is not None}
    todo = [n for n in nodes if n["metadata"]["name"] not in existing]
    t0 = time.monotonic()

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda node: create_idempotent(lambda: core.create_node(node)), todo))
    log(f"created {len(todo)} kwok nodes in {time.monotonic() - t0:.1f}s ({len(existing)} already present)")
    names = {n["metadata"]["name"] for n in nodes}

    def all_ready() -> bool:
        # Raw JSON, paged: the typed client's objects for 12,288 nodes took 1.7 GB and most of a poll.
        ready, cont = 0, None
        while True:
            raw: Any = core.list_node(limit=500, _preload_content=False, _continue=cont)  # an HTTP response
            page = json.loads(raw.data)
            ready += sum(1 for n in page["items"] if n["metadata"]["name"] in names and node_usable(n))
            cont = page["metadata"].get("continue")
            if not cont:
                break
        return ready == len(names)

    # kwok's first statuses and kube-controller-manager's untainting take a while
    _wait(all_ready, f"{len(names)} nodes Ready and untainted", max(300, len(names) // 10))


def status() -> int:
    state = running()
    healthy = 0
    for comp in components():
        ok = comp.name in state and comp.health()
        healthy += ok
        print(f"{comp.name:<24} {'healthy' if ok else 'down':<8} pid={state.get(comp.name, '-')}")
    print(f"kubeconfig: {KUBECONFIG}")
    return 0 if healthy == 5 else 1


def show_nodes() -> None:
    from kubernetes import client
    from railyard.topology.cluster.nodes import build_snapshot

    core = client.CoreV1Api(api())
    objects = api().sanitize_for_serialization(core.list_node().items)
    snap = build_snapshot(objects)
    by_tor: dict[tuple[str, str, str], list[str]] = {}
    for n in snap.nodes:
        by_tor.setdefault((n.spine, n.leaf, n.tor), []).append(n.name)
    gpus = snap.total_gpus
    print(f"{len(snap.nodes)} GPU nodes, {gpus} GPUs, {len(by_tor)} TORs; {len(snap.excluded)} excluded")
    for (spine, leaf, tor), names in sorted(by_tor.items()):
        sample = snap.node(names[0])
        print(f"  {spine:<8} {leaf:<10} {tor:<12} {len(names):>3} nodes x {sample.gpu_count} GPUs "
              f"rails {'.'.join(map(str, sample.rails))}  e.g. {', '.join(names[:3])}")
    for e in snap.excluded[:10]:
        print(f"  excluded {e.node}: {e.reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--profile", default="small", help="cluster profile name or file ('' for no nodes)")
    p_up.add_argument("--k8s-gates", default=None, help=f"opt-in feature gates: {', '.join(sorted(K8S_GATES))}")
    p_up.add_argument("--own", action="store_true",
                      help="reuse a running rig only if --started-by started it with this profile alone, "
                           "else stop it and start afresh")
    p_up.add_argument("--started-by", default=None, help="who starts the rig (shown by describe)")
    p_up.add_argument("--real-node", action="store_true",
                      help="also run a real kubelet node (containerd, kube-proxy, CoreDNS; needs root)")
    p_up.add_argument("--dra", action="store_true",
                      help="publish ResourceSlices and DeviceClasses for the kwok nodes (hack/dra_slices.py)")
    sub.add_parser("down")
    sub.add_parser("status")
    sub.add_parser("nodes")
    sub.add_parser("kubeconfig")
    sub.add_parser("describe")
    sub.add_parser("state-dir")
    sub.add_parser("bin-dir", help="where the pinned kubectl and control-plane binaries are")
    p_nodes = sub.add_parser("create-nodes")
    p_nodes.add_argument("profile")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            up(args.profile or None, args.k8s_gates, real_node=args.real_node, own=args.own,
               started_by=args.started_by)
            if args.dra:
                _dra_publisher().publish(KWOK_LABEL)
        elif args.command == "down":
            down()
        elif args.command == "status":
            return status()
        elif args.command == "nodes":
            show_nodes()
        elif args.command == "kubeconfig":
            print(KUBECONFIG)
        elif args.command == "describe":
            print(describe())
        elif args.command == "state-dir":
            print(STATE)
        elif args.command == "bin-dir":
            print(binary("kube-apiserver").parent)
        elif args.command == "create-nodes":
            create_nodes(load_profile_nodes(args.profile))
            record_rig(args.profile)
    except RigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(map(str, e.cmd))} failed with exit code {e.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
