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


def test_every_folder_of_the_operator_is_a_layer_of_the_import_contract():
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    named = {part.strip() for layer in layers for part in layer.split("|")}
    folders = {f"railyard.operator.{p.name}" for p in (REPO / "operator").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == named, "a folder under operator/ that no layer names escapes the layer contract"
    assert not [p.name for p in (REPO / "operator").glob("*.py")], "operator/ holds layers only"


def test_modules_stay_small_and_say_what_they_own():
    import ast

    long, silent = [], []
    for path in [*(REPO / "operator").rglob("*.py"), *(REPO / "topology").rglob("*.py")]:
        text = path.read_text()
        if len(text.splitlines()) > 520:
            long.append(f"{path.relative_to(REPO)}: {len(text.splitlines())} lines")
        if path.name != "__init__.py" and not ast.get_docstring(ast.parse(text)):
            silent.append(str(path.relative_to(REPO)))
    assert not long and not silent, (long, silent)


def test_the_actors_and_decisions_read_time_only_from_the_injected_clock():
    import ast

    offenders = []
    for folder in ("act", "decide", "cache"):
        for path in (REPO / "operator" / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr in ("time", "monotonic") and \
                        isinstance(node.value, ast.Name) and node.value.id == "time":
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, offenders
