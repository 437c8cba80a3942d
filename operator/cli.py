"""`railyard` command line (placeholder until the planner lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("railyard: no command yet", file=sys.stderr)
    return 2
