"""The placement solver and its internals: a gang request, the one decision function, domains chosen top-down,
GPUs per replica, rank mapping and its communication graph, and the solves built on them (replacements after a
loss, elastic resizes, preemption victims, defragmentation moves, starvation reservations)."""
