"""The package layout promises of the design card."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_operator_from_repo_root_is_the_standard_library():
    out = subprocess.run(
        [sys.executable, "-c", "import operator, sys; print(operator.__file__); print(operator.itemgetter)"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    assert not out[0].startswith(str(REPO)), f"./operator shadows the standard library: {out[0]}"
    assert "itemgetter" in out[1]


def test_railyard_subpackages_map_to_the_flat_directories():
    import railyard.operator
    import railyard.topology

    assert Path(railyard.topology.__file__).parent == REPO / "topology"
    assert REPO / "operator" in [Path(p) for p in railyard.operator.__path__]


def test_operator_directory_has_no_init_so_it_cannot_shadow():
    assert not (REPO / "operator" / "__init__.py").exists()


def test_topology_core_never_imports_the_operator_package():
    # import-linter guards kubernetes/kopf; railyard.operator is a namespace portion it cannot see.
    import ast

    offenders = []
    for path in (REPO / "topology").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("railyard.operator")]
    assert not offenders
