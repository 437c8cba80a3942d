"""The docs name only what exists: every repository path a page names in backticks and every
relative link resolves (a moved or renamed module must take its mentions with it); and
docs/architecture.md names every module (a new module cannot go unmentioned)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "charts" / "railyard" / "README.md",
         REPO / "worker" / "README.md"]
TOP = ("operator/", "topology/", "worker/", "hack/", "tests/", "examples/", "charts/", "crds/", "docs/")
# docs/architecture.md names operator modules by layer: `act/loop.PlacementLoop.run`
LAYERS = ("app/", "act/", "kube/", "cache/", "decide/", "base/")
ARCHITECTURE = REPO / "docs" / "architecture.md"
NAMED = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _named_paths(text: str) -> set[str]:
    out = set()
    for token in NAMED.findall(text):
        path = token.rstrip(".,:;)").split("(")[0]
        if path.startswith(LAYERS):
            path = "operator/" + path
        if path.startswith(TOP) and not any(c in path for c in "*<>{}$|"):
            out.add(path.split("::")[0])
    return out


def _exists(path: str) -> bool:
    """A file or folder, or `module.Name[.attr]`: a module whose source defines Name (and attr)."""
    if (REPO / path).exists():
        return True
    folder, _, last = path.rpartition("/")
    module, _, names = last.partition(".")
    source = REPO / folder / f"{module}.py"
    if not names or not source.exists():
        return False
    text = source.read_text()
    return all(re.search(rf"^\s*(def|async def|class)\s+{re.escape(n)}\b|^\s*{re.escape(n)}\s*[:=]", text, re.M)
               for n in names.split("."))


def test_every_path_a_page_names_exists():
    missing = [f"{page.relative_to(REPO)}: {p}" for page in PAGES if page.exists()
               for p in sorted(_named_paths(page.read_text())) if not _exists(p)]
    assert not missing, missing


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(REPO)}: {target}" for page in PAGES if page.exists()
              for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert not broken, broken


def _module_of(path: str) -> str:
    """`operator/act/loop.PlacementLoop.run` -> `operator/act/loop.py` (a `.py` path stays as it is)."""
    folder, _, last = path.rpartition("/")
    return path if last.endswith(".py") else f"{folder}/{last.partition('.')[0]}.py"


def test_architecture_md_names_every_module():
    named = {_module_of(p) for p in _named_paths(ARCHITECTURE.read_text())}
    modules = {str(p.relative_to(REPO)) for top in ("operator", "topology") for p in (REPO / top).glob("*/*.py")
               if p.name != "__init__.py"}
    assert modules, "no modules found"
    missing = sorted(modules - named)
    assert not missing, f"docs/architecture.md does not name: {missing}"
