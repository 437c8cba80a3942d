"""Real nodes beside the kwok nodes: containerd + runc (Debian packages), a kubelet and kube-proxy
built with the control plane, and a cluster DNS (CoreDNS built from the Go module proxy with only the
plugins used here), so pods run as processes, Services route and `<pod>.<service>.<ns>.svc` resolves.

One node, `real-0`. A second kubelet on the same machine would need its own containerd, bridge and
cgroup root; both would manage the same iptables chains and the same /var/lib/kubelet/device-plugins
(hard-coded in the kubelet), so the rig runs one.

The node carries Railyard's topology labels (its own TOR), a simulated `nvidia.com/gpu: 8` capacity
(patched into its status), and the taint `railyard.dev/real-node=true:NoSchedule`: only pods that
tolerate it run there. Pod network: the bridge `railyard0` (10.88.0.1/24, also the node IP: the
kubelet refuses a loopback one); CoreDNS listens there too and is the pods' nameserver.

What the kubelet, containerd and the CNI plugins change on the host outlives them; `up` records the host
first and `down` undoes what changed since (hack/host_record.py: sysctls restored, iptables chains and rules,
mounts, network namespaces, links, cgroups and directories removed).
The machine quirks this works around are in ../shared/design/real-node-recipe.md: containerd must not
lower oom_score_adj (`restrict_oom_score_adj`), cgroup v1 needs `failCgroupV1: false`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import cluster
import host_record

NODE = "real-0"
BRIDGE, BRIDGE_IP, SUBNET = "railyard0", cluster.REAL_NODE_IP, "10.88.0.0/24"
TAINT = {"key": "railyard.dev/real-node", "value": "true", "effect": "NoSchedule"}
GPUS = 8
PORTS = {"kubelet": 10350, "kubelet-healthz": 10348, "kube-proxy-metrics": 10349, "kube-proxy-healthz": 10356,
         "coredns-health": 18053}
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
COMPONENTS = ("containerd", "kubelet", "kube-proxy", "coredns")
ROOT = cluster.STATE / "realnode"
SOCKET = ROOT / "containerd" / "containerd.sock"
TOOLS = {"containerd": "containerd", "runc": "runc", "ctr": "containerd", "ip": "iproute2",
         "iptables": "iptables", "iptables-save": "iptables", "nft": "nftables"}


def missing_tools() -> list[str]:
    missing = [f"{tool} (Debian package {pkg})" for tool, pkg in TOOLS.items() if shutil.which(tool) is None]
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("/usr/lib/cni/bridge (Debian package containernetworking-plugins)")
    return missing


# --- configuration ----------------------------------------------------------------------------------

def node_labels() -> dict[str, str]:
    from railyard.topology.cluster import labels as L

    return {L.LABEL_SPINE: "spine-real", L.LABEL_LEAF: "leaf-real", L.LABEL_TOR: "tor-real",
            L.LABEL_GPU_RAIL: ".".join(str(i) for i in range(GPUS)),
            L.LABEL_GPU_NUMA: ".".join(str(i // (GPUS // 2)) for i in range(GPUS)),
            L.LABEL_GPU_NVLINK: ".".join("0" for _ in range(GPUS)), L.LABEL_GPU_PRODUCT: "simulated-H100",
            L.LABEL_GPU_COUNT: str(GPUS), "railyard.dev/real-node": "true"}


def _write_configs() -> None:
    pki = cluster.STATE / "pki"
    for d in ("containerd/root", "containerd/state", "cni/net.d", "kubelet", "kubelet-certs", "logs"):
        (ROOT / d).mkdir(parents=True, exist_ok=True)
    cluster.issue_cert(pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{NODE}", "extendedKeyUsage=clientAuth\n")
    cluster.issue_cert(pki, "kube-proxy", "/CN=system:kube-proxy", "extendedKeyUsage=clientAuth\n")
    cluster.write_client_kubeconfig(ROOT / "kubelet.kubeconfig", pki / "kubelet-client.crt", pki / "kubelet-client.key")
    cluster.write_client_kubeconfig(ROOT / "kube-proxy.kubeconfig", pki / "kube-proxy.crt", pki / "kube-proxy.key")
    (ROOT / "containerd.toml").write_text(f"""version = 2
root = "{ROOT / 'containerd/root'}"
state = "{ROOT / 'containerd/state'}"
[grpc]
  address = "{SOCKET}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # No CAP_SYS_RESOURCE on this machine kind: nothing may lower oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{ROOT / 'cni/net.d'}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{ROOT / 'containerd/opt'}"
""")
    (ROOT / "cni/net.d/10-railyard.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "railyard",
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET, "gateway": BRIDGE_IP}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(ROOT / "cni/ipam")}},
                    {"type": "portmap", "capabilities": {"portMappings": True}}]}, indent=2))
    (ROOT / "kubelet.yaml").write_text(f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {BRIDGE_IP}
port: {PORTS['kubelet']}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {PORTS['kubelet-healthz']}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {pki / 'ca.crt'}}}
authorization: {{mode: AlwaysAllow}}
containerRuntimeEndpoint: unix://{SOCKET}
cgroupDriver: cgroupfs
# This machine kind has cgroup v1 only: kubelet 1.36 refuses it unless told otherwise.
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [{BRIDGE_IP}]
maxPods: 32
registerWithTaints:
  - {{key: {TAINT['key']}, value: "{TAINT['value']}", effect: {TAINT['effect']}}}
# The machine's disk is shared: evict only when it is truly full, and never garbage-collect the
# images imported here (nothing could pull them back).
evictionHard: {{memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: /etc/resolv.conf
""")
    (ROOT / "kube-proxy.yaml").write_text(f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {ROOT / 'kube-proxy.kubeconfig'}}}
hostnameOverride: {NODE}
mode: iptables
clusterCIDR: {SUBNET}
bindAddress: {BRIDGE_IP}
metricsBindAddress: 127.0.0.1:{PORTS['kube-proxy-metrics']}
healthzBindAddress: 127.0.0.1:{PORTS['kube-proxy-healthz']}
# Leave the host's conntrack settings alone (0: do not change).
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
# Pods on one bridge reach each other through a Service: masquerade, so replies come back through
# the host (no br_netfilter here).
iptables: {{masqueradeAll: true, syncPeriod: 10s, minSyncPeriod: 1s}}
nodePortAddresses: ["{BRIDGE_IP}/32"]
""")
    (ROOT / "Corefile").write_text(f""".:53 {{
    bind {BRIDGE_IP}
    errors
    health 127.0.0.1:{PORTS['coredns-health']}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {cluster.KUBECONFIG}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 5
}}
""")


def _bridge() -> None:
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0:
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)


def _healthz(port: int, path: str = "/healthz") -> bool:
    return cluster._http_ok(f"http://127.0.0.1:{port}{path}")


def components() -> list[cluster.Component]:
    return [
        cluster.Component("containerd", ["containerd", f"--config={ROOT / 'containerd.toml'}"],
                          lambda: SOCKET.exists() and _ctr("version").returncode == 0),
        cluster.Component("kubelet", [
            str(cluster.binary("kubelet")), f"--config={ROOT / 'kubelet.yaml'}",
            f"--kubeconfig={ROOT / 'kubelet.kubeconfig'}", f"--root-dir={ROOT / 'kubelet'}",
            f"--cert-dir={ROOT / 'kubelet-certs'}", f"--hostname-override={NODE}", f"--node-ip={BRIDGE_IP}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in node_labels().items()), "--v=1",
        ], lambda: _healthz(PORTS["kubelet-healthz"])),
        cluster.Component("kube-proxy", [str(cluster.binary("kube-proxy")), f"--config={ROOT / 'kube-proxy.yaml'}"],
                          lambda: _healthz(PORTS["kube-proxy-healthz"])),
        cluster.Component("coredns", [str(cluster.binary("coredns")), "-conf", str(ROOT / "Corefile")],
                          lambda: _healthz(PORTS["coredns-health"], "/health")),
    ]


def _ctr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", "--address", str(SOCKET), "-n", "k8s.io", *args], capture_output=True, text=True)


def import_image(archive: Path) -> None:
    """An OCI archive into the node's containerd (the `k8s.io` namespace: the kubelet's)."""
    out = _ctr("image", "import", str(archive))
    if out.returncode != 0:
        raise cluster.RigError(f"ctr image import {archive.name} failed: {out.stderr.strip()}")


def _pause_archive() -> Path:
    """The sandbox image: the static pause binary as a one-layer image."""
    import images

    return images.single_binary_image(cluster.binary("pause"), PAUSE_IMAGE, ROOT / "pause.oci.tar")


# --- up and down ------------------------------------------------------------------------------------

def prepare() -> None:
    """Checks, the host's state recorded (what `down` restores), the bridge (before the API server starts:
    it advertises the bridge's address)."""
    if os.geteuid() != 0:
        raise cluster.RigError("a real node needs root (containerd, the kubelet, iptables)")
    missing = missing_tools()
    if missing:
        raise cluster.RigError(f"a real node needs {', '.join(missing)}: run hack/deps.sh")
    ROOT.mkdir(parents=True, exist_ok=True)
    before = ROOT / "host-before.json"
    if not before.exists():
        host_record.clear_leftovers()
        before.write_text(json.dumps(host_record.host_state(), indent=1))
    _bridge()


def up(images: list[Path]) -> None:
    t0 = time.monotonic()
    prepare()
    _write_configs()
    comps = {c.name: c for c in components()}
    cluster.start(comps["containerd"])
    for archive in [_pause_archive(), *images]:
        import_image(archive)
    cluster.start(comps["kubelet"])
    core = cluster.core_api()
    cluster._wait(lambda: _ready(core), f"node {NODE} Ready", 120)
    core.patch_node_status(NODE, [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(GPUS)}])
    cluster.start(comps["kube-proxy"])
    cluster.start(comps["coredns"])
    cluster.log(f"real node {NODE} ready in {time.monotonic() - t0:.1f}s ({len(images)} images imported)")


def _ready(core: Any) -> bool:
    try:
        node = core.read_node(NODE)
    except Exception:  # not registered yet
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def running() -> dict[str, int]:
    out = {}
    for name in COMPONENTS:
        f = cluster._pid_file(name)
        if f.exists():
            pid = int(f.read_text().strip() or 0)
            if pid and _alive(pid, name):
                out[name] = pid
    return out


def _alive(pid: int, name: str) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return False
    return Path(argv0).name == name


def _stop(name: str, pid: int, timeout: float = 15) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid, name) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid, name):
        os.kill(pid, signal.SIGKILL)


def restart_kubelet() -> float:
    """Stop the node's kubelet and start it again (its pods' containers go on running under containerd, as on a
    kubelet upgrade or crash); the seconds it was away."""
    pid = running().get("kubelet")
    t0 = time.monotonic()
    if pid is not None:
        _stop("kubelet", pid)
    cluster.start({c.name: c for c in components()}["kubelet"])
    return time.monotonic() - t0


def _delete_pods(core: Any) -> None:
    """Every pod on the node, deleted now: the kubelet tears down their sandboxes, veths and netns."""
    try:
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}").items
        for pod in pods:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    except Exception as e:  # the API server may be gone already: the sandboxes are removed below
        cluster.log(f"real node: pods not deleted through the API ({e}); removing sandboxes directly")
        return
    # The kubelet usually tears them down in a few seconds; what is left is killed below.
    cluster._wait(lambda: "RUNNING" not in _ctr("tasks", "list").stdout, "real node containers stopped", 20)


def down() -> list[str]:
    """Stop the real node and undo what it did to the host. Safe to call when it never started."""
    if not ROOT.exists():
        return []
    stopped: list[str] = []
    state = running()
    if "kubelet" in state:
        try:
            _delete_pods(cluster.core_api())
        except cluster.RigError as e:
            cluster.log(f"real node: {e}")
    for name in ("coredns", "kube-proxy", "kubelet"):
        if name in state:
            _stop(name, state[name])
            stopped.append(name)
    if shutil.which("kube-proxy") or cluster.binary("kube-proxy").exists():
        subprocess.run([str(cluster.binary("kube-proxy")), "--cleanup"], capture_output=True)
    if "containerd" in state:
        for task in _ctr("tasks", "list", "-q").stdout.split():
            _ctr("tasks", "kill", "-s", "SIGKILL", task)
        time.sleep(0.5)
        for task in _ctr("tasks", "list", "-q").stdout.split():
            _ctr("tasks", "delete", "-f", task)
        for container in _ctr("containers", "list", "-q").stdout.split():
            _ctr("containers", "delete", container)
        _stop("containerd", state["containerd"])
        stopped.append("containerd")
    _kill_shims()
    before = ROOT / "host-before.json"
    host_record.restore(json.loads(before.read_text()) if before.exists() else host_record.host_state())
    before.unlink(missing_ok=True)
    return stopped


def _kill_shims() -> None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and Path(cmd[0].decode(errors="replace")).name.startswith("containerd-shim") and \
                str(ROOT).encode() in b" ".join(cmd) + (proc / "environ").read_bytes():
            os.kill(int(proc.name), signal.SIGKILL)
