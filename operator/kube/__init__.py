"""I/O with the API server and the pods: the one client module (the only importer of `kubernetes`),
the protocol the actors program against, list+watch reflectors, the Lease, the worker report endpoint.

May import `base`, `decide`, `cache`; never the actors or the app."""
