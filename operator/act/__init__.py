"""Actors: the placement loop and everything that turns a decision into API calls. Each module owns
one job (write status, post events, create and release a gang, restart, resize, checkpoints,
stragglers, quarantine, metrics); the decisions they carry out come from `railyard.operator.decide`.

May import `base`, `decide`, `cache`, `kube`; never the app (Kopf wiring, CLI)."""
