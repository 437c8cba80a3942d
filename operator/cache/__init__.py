"""What the operator knows: the cluster state its reflectors and its own write responses feed,
incremental usage per node, one memory record per job, the book of worker reports. In memory only;
no I/O, no asyncio, no clock of its own (callers pass the time).

May import `railyard.operator.base`, `railyard.operator.decide` and the pure core."""
