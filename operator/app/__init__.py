"""The entry points: the `railyard` CLI (planner, live-cluster reads, benchmark, operator), the Kopf
wiring that runs the operator process, and the terminal rendering of what the CLI reads.

The top layer: may import every other layer; nothing imports it.

Importing it pins OpenBLAS to one thread unless the environment says otherwise. Placement works on
small matrices (the rank mapping's 128 x 128 product), where OpenBLAS's worker threads only wait for
a core: on a busy 2-core machine that product took 10-28 ms instead of 0.6, and the waiting threads
spin on the cores the API server needs. It must happen before numpy is first imported."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
