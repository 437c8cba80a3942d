"""The CLI and the operator it starts run OpenBLAS on one thread (operator/app/__init__.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Asks numpy's OpenBLAS itself, in a fresh process that imported only the CLI first.
PROBE = """
import ctypes
import json
import railyard.operator.app.cli  # noqa: F401
import numpy  # noqa: F401
paths = {line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line and "numpy" in line}
counts = []
for path in paths:
    lib = ctypes.CDLL(path)
    for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
        if hasattr(lib, name):
            counts.append(getattr(lib, name)())
            break
print(json.dumps(counts))
"""


def test_the_cli_pins_openblas_to_one_thread() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: OpenBLAS starts one thread anyway, so the pin cannot be seen")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True).stdout
    counts = json.loads(out)
    if not counts:
        pytest.skip("this numpy's BLAS is not OpenBLAS or does not say its thread count")
    assert counts == [1] * len(counts)
