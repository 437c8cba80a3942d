"""hack/build-binaries.sh's guard for the tools hack/deps.sh installs: a build step that needs one stops naming
it (and where it comes from) rather than failing halfway through a compiler's output. The function is read out
of the script and run as the script runs it (bash, `set -euo pipefail`)."""

from __future__ import annotations

import re
import subprocess

from tests.support.rig import REPO

SCRIPT = REPO / "hack" / "build-binaries.sh"


def _run_need(tool: str) -> subprocess.CompletedProcess[str]:
    found = re.search(r"^need\(\) \{.*\}$", SCRIPT.read_text(), re.M)
    assert found, "hack/build-binaries.sh has no one-line need() function"
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{found.group(0)}\nneed {tool}\necho went-on"],
                          capture_output=True, text=True, check=False)


def test_a_missing_tool_stops_the_build_naming_it_and_where_it_comes_from():
    ran = _run_need("railyard-no-such-tool")
    assert ran.returncode == 1
    assert "went-on" not in ran.stdout
    assert "railyard-no-such-tool not found (hack/deps.sh installs it)" in ran.stderr


def test_a_tool_on_the_path_lets_the_build_go_on():
    ran = _run_need("bash")
    assert (ran.returncode, ran.stdout.strip(), ran.stderr) == (0, "went-on", "")
