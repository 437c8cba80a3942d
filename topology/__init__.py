"""Railyard's pure core: the cluster topology model and the gang placement solver.

Nothing here talks to Kubernetes; inputs are plain dicts shaped like API objects and outputs are
immutable values. The operator and the CLI are the only callers that do I/O.
"""
