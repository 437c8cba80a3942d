"""One bad template never stops the others: templates mutated at random (wrong types, missing keys,
huge values) in the fields the solver reads, submitted beside a healthy job. Every mutant ends placed
or with a condition that names the field (InvalidSpec), the healthy job is placed, and the pass never
raises. The API server's own rejection of what its schema catches is the e2e test's
(tests/e2e/test_routine_ops.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.cache.state import KINDS, ClusterState

from tests.support import status as cond
from tests.support.clusters import profile_nodes
from tests.support.fakeapi import FakeApi
from tests.support.jobs import make_job
from tests.support.settings import settings as operator_settings

FIELDS = ["nodeSelector", "affinity", "tolerations", "topologySpreadConstraints", "initContainers", "overhead",
          "priorityClassName", "priority", "restartPolicy", "schedulingGates", "schedulerName", "containers"]
junk = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
NESTED = {
    "affinity": ["nodeAffinity", "podAntiAffinity", "podAffinity"],
    "containers": ["resources", "name"],
}


@st.composite
def mutant(draw: st.DrawFn) -> dict[str, Any]:
    body = make_job("mutant", 2, gpus=4)
    spec = body["spec"]["template"]["spec"]
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(FIELDS))
        if field in NESTED and draw(st.booleans()):
            inner = draw(st.sampled_from(NESTED[field]))
            target = spec.get(field)
            if field == "containers" and isinstance(target, list) and target and isinstance(target[0], dict):
                target[0][inner] = draw(junk)
            elif field == "affinity":
                if not isinstance(target, dict):
                    target = spec["affinity"] = {}
                target[inner] = draw(junk)
        elif draw(st.booleans()):
            spec[field] = draw(junk)
        else:
            spec.pop(field, None)
    return body


# Found by this test in CI: a quantity past int64's range overflowed the solver's arrays (InternalError).
_HUGE_OVERHEAD = make_job("mutant", 2, gpus=4)
_HUGE_OVERHEAD["spec"]["template"]["spec"]["overhead"] = {"": 9223372036854776.0}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(mutant(), min_size=1, max_size=3))
@example(bodies=[_HUGE_OVERHEAD])
def test_mutated_templates_end_in_a_clear_condition_and_never_stop_the_others(bodies):
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=4))
    names = []
    for i, body in enumerate(bodies):
        body = copy.deepcopy(body)
        body["metadata"]["name"] = f"mutant-{i}"
        api.create_job(body)
        names.append(body["metadata"]["name"])
    api.create_job(make_job("healthy", 1, gpus=8))
    state = ClusterState()
    for kind in KINDS:
        items, rv = api.listing(kind)
        state.replace(kind, items, rv)
    asyncio.run(PlacementLoop(state, api, operator_settings(), lambda: True).run_once())
    status = api.objects["trainingjobs"][("default", "healthy")].get("status") or {}
    assert (cond.get(status.get("conditions"), cond.PLACED) or {}).get("reason") == "Released"
    for name in names:
        conditions = (api.objects["trainingjobs"][("default", name)].get("status") or {}).get("conditions")
        placed = cond.get(conditions, cond.PLACED) or {}
        assert placed.get("reason") in ("Released", "Unschedulable", "InvalidSpec"), (name, placed)
        if placed["reason"] == "InvalidSpec":
            assert placed["message"].startswith("spec."), placed["message"]
        assert placed.get("reason") != "InternalError"
