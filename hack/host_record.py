"""What the rig's real node changes on the host outside the rig's own directory, and putting it back: the record
taken before the node starts (`host_state`), the restore after it stops (`restore`), the comparison hack/test.sh
runs around the whole suite (`host_record.py snapshot|check FILE`), and the sweep of the iptables rules a rig
killed before its teardown left (`clear_leftovers`).

The kubelet, kube-proxy, containerd and the CNI plugins leave sysctls, iptables chains and rules, mounts,
network namespaces, links, cgroups and directories behind them; everything here is compared by presence (and
sysctls by value), so the host's own state is left as it was found.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import cluster

SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "net.ipv4.ip_forward",
           "net.ipv4.conf.all.route_localnet", "net.bridge.bridge-nf-call-iptables")
# Outside the rig's state directory, written by the kubelet, containerd and the CNI plugins.
HOST_DIRS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd",
             "/etc/cni/net.d", "/opt/cni")
IPTABLES = {"iptables": "ip", "ip6tables": "ip6"}  # the commands, and nft's family for their tables
CGROUP_NAMES = ("kubepods", "kubepods.slice", "k8s.io", "railyard-node")
# Processes that own KUBE-* chains while they run: the kubelet and kube-proxy, or a distribution running both
# inside one process (k3s, k0s, RKE2, MicroK8s' kubelite).
KUBE_PROCESSES = ("kubelet", "kube-proxy", "kubelite")
KUBE_PROCESS_PREFIXES = ("k3s", "k0s", "rke2")


# --- reading the host --------------------------------------------------------------------------------

def _sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def _save(cmd: str) -> list[str]:
    """The lines of `<cmd>-save`, comments aside; none without the tool."""
    if shutil.which(f"{cmd}-save") is None:
        return []
    out = subprocess.run([f"{cmd}-save"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line and not line.startswith("#")]


def _saved(cmd: str) -> list[tuple[str, str]]:
    """Every chain (`:NAME ...`) and rule (`-A ...`) line of `<cmd>-save` with its table, in the order saved."""
    table, found = "filter", []
    for line in _save(cmd):
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith((":", "-A ")):
            found.append((table, line))
    return found


def _recorded(cmd: str) -> list[str]:
    """The lines of `<cmd>-save`, chains without their counters, sorted: what the teardown must leave as it was."""
    return sorted(line.split(" [", 1)[0] if line.startswith(":") else line for line in _save(cmd))


def _mounts() -> set[str]:
    return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}


def _netns() -> set[str]:
    return {p.name for p in Path("/run/netns").iterdir()} if Path("/run/netns").is_dir() else set()


def _links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def _cgroups() -> list[str]:
    root = Path("/sys/fs/cgroup")
    tops = root.iterdir() if root.is_dir() else []
    return sorted(str(top / name) for top in tops for name in CGROUP_NAMES if (top / name).exists())


def host_state() -> dict[str, Any]:
    """What a real node may change on the host: recorded before it starts, compared after it stops."""
    return {
        "sysctls": {name: _sysctl(name) for name in SYSCTLS},
        "iptables": _recorded("iptables"), "ip6tables": _recorded("ip6tables"),
        "mounts": sorted(_mounts()), "netns": sorted(_netns()), "cgroups": _cgroups(), "links": sorted(_links()),
        "dirs": sorted(d for d in HOST_DIRS if Path(d).exists()),
    }


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two records, one line per kind (the first ten added and removed of each)."""
    changed = []
    for key, value in before.items():
        if after.get(key) == value:
            continue
        if isinstance(value, list):
            added, removed = sorted(set(after[key]) - set(value)), sorted(set(value) - set(after[key]))
            changed.append(f"{key}: added {added[:10]}, removed {removed[:10]}")
        else:
            changed.append(f"{key}: {value} -> {after.get(key)}")
    return changed


# --- iptables rules and chains ------------------------------------------------------------------------

def rule_args(line: str) -> list[str]:
    """An `-A CHAIN ...` line of `<cmd>-save` as the arguments that name the rule (`-D` takes them): quoted
    comments stay one argument, or the kubelet's "block incoming localnet connections" rule is never removed."""
    return shlex.split(line)[1:]


def kube_rule(line: str) -> bool:
    """A rule a kubelet or kube-proxy made: in one of their chains (all named KUBE-…) or jumping (`-j`) or going
    (`-g`) to one."""
    args = rule_args(line)
    targets = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in ("-j", "-g")]
    return args[0].startswith("KUBE-") or any(t.startswith("KUBE-") for t in targets)


def user_chain(line: str) -> str | None:
    """The name on a `:NAME POLICY ...` line of a chain someone made (policy `-`); None for a built-in one."""
    name, _, rest = line[1:].partition(" ")
    return name if line.startswith(":") and rest.startswith("-") else None


Rules = list[tuple[str, str]]  # (table, `-A ...` line)
Chains = list[tuple[str, str]]  # (table, chain name)


RIG_CHAIN_PREFIXES = ("KUBE-", "CNI-")  # the chains a kubelet, kube-proxy and the CNI plugins make


def undo(saved: Rules, before: list[str]) -> tuple[Rules, Chains]:
    """What to delete so iptables is as recorded (`before`, a record's lines): the rules not in it, then the chains
    a kubelet, kube-proxy or CNI plugin made since (a chain anyone else made since is left for the check to
    report: a record reused after a killed rig must not cost the host what it gained meanwhile)."""
    rules = [(table, line) for table, line in saved if line.startswith("-A ") and line not in before]
    known = {name for line in before if (name := user_chain(line))}
    return rules, [(table, name) for table, line in saved
                   if (name := user_chain(line)) and name not in known and name.startswith(RIG_CHAIN_PREFIXES)]


def leftovers(saved: Rules) -> tuple[Rules, Chains]:
    """What a kubelet or kube-proxy left: every rule in or to a KUBE-* chain, then those chains."""
    rules = [(table, line) for table, line in saved if line.startswith("-A ") and kube_rule(line)]
    return rules, [(table, name) for table, line in saved if (name := user_chain(line)) and name.startswith("KUBE-")]


def _delete(cmd: str, rules: Rules, chains: Chains) -> None:
    """The rules, then every chain flushed, then deleted: a chain still jumped to (by a rule whose `-D` failed, in
    another of these chains) cannot be deleted, and flushing them all first removes such jumps."""
    for table, line in rules:
        subprocess.run([cmd, "-t", table, "-D", *rule_args(line)], capture_output=True)
    for flag in ("-F", "-X"):
        for table, chain in chains:
            subprocess.run([cmd, "-t", table, flag, chain], capture_output=True)


def _restore_iptables(cmd: str, before: list[str]) -> None:
    if not before:  # recorded without the tool: nothing to compare with, nothing of the host's to risk
        return
    _delete(cmd, *undo(_saved(cmd), before))
    for table in ("filter", "nat", "mangle"):  # iptables-nft leaves the tables it made, empty: only nft removes them
        if f"*{table}" not in before and shutil.which("nft"):
            subprocess.run(["nft", "delete", "table", IPTABLES[cmd], table], capture_output=True)


def owns_kube_chains(process: str) -> bool:
    """Whether a process of this name (/proc/PID/comm) keeps KUBE-* chains while it runs."""
    return process in KUBE_PROCESSES or process.startswith(KUBE_PROCESS_PREFIXES)


def _kube_runs() -> bool:
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and owns_kube_chains((proc / "comm").read_text().strip()):
                return True
        except OSError:
            continue
    return False


def clear_leftovers() -> int:
    """Remove the iptables rules and chains of a kubelet or kube-proxy that no longer runs — a rig killed before
    its teardown leaves them — so the record taken before the node starts is the host's own. Nothing is touched
    while a process that owns KUBE-* chains runs on the host. Returns how many rules went."""
    if _kube_runs():
        return 0
    removed = 0
    for cmd in IPTABLES:
        rules, chains = leftovers(_saved(cmd))
        _delete(cmd, rules, chains)
        removed += len(rules)
    if removed:
        cluster.log(f"real node: removed {removed} iptables rules of a kubelet or kube-proxy no longer running "
                    "(a rig stopped before its teardown)")
    return removed


# --- putting it back ------------------------------------------------------------------------------------

def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError as e:
        cluster.log(f"real node: cgroup {path} not removed ({e})")


def restore(before: dict[str, Any]) -> None:
    """Undo what the node did since `before` (a `host_state()`): mounts (deepest first), network namespaces,
    links, cgroups (leaves first), iptables, sysctls, directories."""
    for mount in sorted(_mounts() - set(before["mounts"]), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    for ns in _netns() - set(before["netns"]):
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    for link in _links() - set(before["links"]):
        subprocess.run(["ip", "link", "delete", link], capture_output=True)
    for cg in sorted(set(_cgroups()) - set(before["cgroups"])):
        # rmdir of a cgroup with children fails.
        for d in sorted((p for p in Path(cg).rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            _rmdir(d)
        _rmdir(Path(cg))
    for cmd in IPTABLES:
        if shutil.which(cmd) is not None and shutil.which(f"{cmd}-save") is not None:
            _restore_iptables(cmd, before[cmd])
    for name, value in before["sysctls"].items():
        if value is not None and _sysctl(name) != value:
            Path("/proc/sys", name.replace(".", "/")).write_text(value)
    for gone in set(HOST_DIRS) - set(before["dirs"]):
        shutil.rmtree(gone, ignore_errors=True)


def main(argv: list[str]) -> int:
    """`host_record.py snapshot FILE` records the host (after clearing what a killed rig left in iptables);
    `host_record.py check FILE` fails (naming what changed) unless the host is as recorded: hack/test.sh runs
    them around the whole suite."""
    if len(argv) != 2 or argv[0] not in ("snapshot", "check"):
        print("usage: host_record.py snapshot|check FILE", file=sys.stderr)
        return 2
    path = Path(argv[1])
    if argv[0] == "snapshot":
        clear_leftovers()
        path.write_text(json.dumps(host_state(), indent=1))
        return 0
    changed = changes(json.loads(path.read_text()), host_state())
    for line in changed:
        print(f"host changed by the rig: {line}", file=sys.stderr)
    if not changed:
        print("host as it was before the rig", file=sys.stderr)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
