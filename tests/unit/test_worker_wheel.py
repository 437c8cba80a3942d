"""railyard-worker is a wheel of its own for training images: the worker's modules only, no dependencies,
importable in a fresh environment where it loads the standard library only, on the Python it declares."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.support.rig import REPO

WORKER = REPO / "worker"


def _wheel(tmp_path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(WORKER)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("railyard_worker-*.whl")
    return wheel


def test_the_wheel_holds_the_worker_alone_with_no_dependencies_and_installs_on_its_own(tmp_path):
    wheel = _wheel(tmp_path / "dist")
    with zipfile.ZipFile(wheel) as z:
        modules = sorted(n for n in z.namelist() if not n.startswith("railyard_worker-"))
        metadata = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
    assert modules == sorted(f"railyard/worker/{p.name}" for p in WORKER.glob("*.py")), modules
    assert "Requires-Dist" not in metadata
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
                   check=True, capture_output=True)
    code = ("import sys; before = set(sys.modules); from railyard import worker; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(worker.context({'RANK': '3', 'WORLD_SIZE': '4'}).rank, "
            "sorted(m for m in new if m not in sys.stdlib_module_names and m != 'railyard'))")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert out.stdout.split() == ["3", "[]"], out.stdout


def test_the_declared_oldest_python_is_what_the_code_needs():
    declared = tomllib.loads((WORKER / "pyproject.toml").read_text())["project"]["requires-python"]
    vermin = str(Path(sys.executable).parent / "vermin")
    out = subprocess.run([vermin, "--no-tips", "--violations", f"-t={declared[2:]}-", "--eval-annotations",
                          *map(str, sorted(WORKER.glob("*.py")))],
                         capture_output=True, text=True)
    assert declared.startswith(">=") and out.returncode == 0, out.stdout + out.stderr
