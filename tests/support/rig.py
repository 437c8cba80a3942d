"""Where the pinned binaries built by hack/build-binaries.sh live (read from hack/cluster.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_hack_module(name: str, filename: str):
    """A script under hack/ as a module (hack/ is not a package; some file names have dashes)."""
    key = f"railyard_hack_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, REPO / "hack" / filename)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def rig_binary(component: str) -> Path:
    path = load_hack_module("cluster", "cluster.py").binary(component)
    assert path.exists(), f"{path} is missing: run hack/build-binaries.sh"
    return path
