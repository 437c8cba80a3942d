"""The docs name only what exists: every repository path a page names in backticks and every
relative link resolves (a moved or renamed module must take its mentions with it)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "charts" / "railyard" / "README.md",
         REPO / "worker" / "README.md"]
TOP = ("operator/", "topology/", "worker/", "hack/", "tests/", "examples/", "charts/", "crds/", "docs/")
# docs/architecture.md names operator modules by layer: `act/loop.PlacementLoop.run`
LAYERS = ("app/", "act/", "bench/", "kube/", "cache/", "decide/", "base/")
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
