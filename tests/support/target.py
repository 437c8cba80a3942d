"""Which cluster the e2e suite may touch. The local rig (hack/cluster.py) by default, started when it
is not running; another cluster only by an explicit, named opt-in: RAILYARD_E2E_CLUSTER set to the API
server URL of $KUBECONFIG's current context. A KUBECONFIG exported for daily work never redirects the
suite, whose tests taint nodes NoExecute, lower their allocatable and relabel them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.rig import REPO, load_hack_module

OPT_IN = "RAILYARD_E2E_CLUSTER"


class TargetRefused(RuntimeError):
    pass


@dataclass(frozen=True)
class Target:
    kubeconfig: str
    local_rig: bool


def current_server(kubeconfig: str) -> str:
    """The API server URL of the kubeconfig's current context (the first file of a path list)."""
    path = Path(kubeconfig.split(":")[0]).expanduser()
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise TargetRefused(f"KUBECONFIG={kubeconfig}: cannot read it ({e.strerror})") from None
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or []}
    context = contexts.get(config.get("current-context"), {})
    return str(clusters.get(context.get("cluster"), {}).get("server", ""))


def rig_kubeconfig() -> Path:
    return Path(load_hack_module("cluster", "cluster.py").KUBECONFIG)


def choose_target(env: Mapping[str, str], start_rig: bool = True) -> Target:
    named = env.get(OPT_IN, "")
    kubeconfig = env.get("KUBECONFIG", "")
    rig = rig_kubeconfig()
    if named:
        if not kubeconfig:
            raise TargetRefused(f"{OPT_IN}={named} but KUBECONFIG is not set: export the kubeconfig of that cluster")
        server = current_server(kubeconfig)
        if server.rstrip("/") != named.rstrip("/"):
            raise TargetRefused(f"{OPT_IN}={named} but KUBECONFIG's current context is {server or 'no server'}; "
                                "they must name the same API server")
        return Target(kubeconfig, local_rig=Path(kubeconfig).resolve() == rig.resolve())
    if kubeconfig and Path(kubeconfig).resolve() != rig.resolve():
        server = current_server(kubeconfig)
        raise TargetRefused(
            f"KUBECONFIG names {server or kubeconfig}, a cluster this suite did not start; its tests taint nodes "
            f"NoExecute, lower their allocatable and relabel them. Unset KUBECONFIG to use the local rig, or "
            f"opt in with {OPT_IN}={server or '<API server URL>'}")
    if start_rig:
        subprocess.run([sys.executable, str(REPO / "hack" / "cluster.py"), "up", "--profile", "small"], check=True)
    return Target(str(rig), local_rig=True)
