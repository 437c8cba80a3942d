"""What node modelling reads of a Node object, as one comparable value: a node event whose
fingerprint did not change (a heartbeat) costs no re-modelling (cache/state.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from railyard.operator.base.keys import ANNOTATION_MAINTENANCE, ANNOTATION_QUARANTINED_AT, ANNOTATION_QUARANTINED_UNTIL

NODE_ANNOTATIONS_READ = (ANNOTATION_QUARANTINED_UNTIL, ANNOTATION_QUARANTINED_AT, ANNOTATION_MAINTENANCE)


def node_fingerprint(body: Mapping[str, Any]) -> tuple:
    """Everything node modelling reads; heartbeats change none of it, so they cost no re-modelling."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    conditions = tuple(sorted((c.get("type"), c.get("status"), c.get("lastTransitionTime"))
                              for c in status.get("conditions") or []))
    return (tuple(sorted((meta.get("labels") or {}).items())), bool(spec.get("unschedulable")),
            tuple((meta.get("annotations") or {}).get(a) for a in NODE_ANNOTATIONS_READ),
            tuple((t.get("key"), t.get("value"), t.get("effect")) for t in spec.get("taints") or []),
            tuple(sorted((status.get("allocatable") or {}).items())), conditions)
