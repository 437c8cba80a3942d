"""The entry points: the `railyard` CLI (planner, live-cluster reads, benchmark, operator), the Kopf
wiring that runs the operator process, and the terminal rendering of what the CLI reads.

The top layer: may import every other layer; nothing imports it."""
