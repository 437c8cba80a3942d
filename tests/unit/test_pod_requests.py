"""A pod's requests and usage as the watch reads them (topology/cluster/resources.py, nodes.py): the fast path for pods
without init containers or overhead, the shared read of both usages and the memo of parsed quantities give the same
answers, and the same errors, as the general rules."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.api.quantity import _parse_milli, parse_milli
from railyard.topology.cluster.nodes import pod_usage, pod_usages
from railyard.topology.cluster.resources import _with_init_containers, pod_requests

QUANTITY = st.one_of(st.sampled_from(["10m", "1", "1.5", "64Gi", "500Mi", "1e3", "2k", "0", "8", "bad", "-1", ""]),
                     st.integers(-1, 10), st.floats(0, 4, allow_nan=False), st.booleans())
RESOURCE = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "example.com/nic"])
RESOURCES = st.dictionaries(RESOURCE, QUANTITY, max_size=3)
CONTAINER = st.fixed_dictionaries({"name": st.just("c")}, optional={
    "resources": st.fixed_dictionaries({}, optional={"requests": RESOURCES, "limits": RESOURCES})})
SPEC = st.fixed_dictionaries({"containers": st.lists(CONTAINER, max_size=3)},
                             optional={"nodeName": st.sampled_from(["gpu-0", "gpu-1"])})


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except ValueError as e:
        return ("ValueError", str(e))


@settings(max_examples=300)
@given(SPEC)
def test_the_containers_only_path_counts_as_the_general_rule(spec: dict) -> None:
    assert _outcome(pod_requests, spec) == _outcome(_with_init_containers, spec)


@settings(max_examples=300)
@given(SPEC, st.sampled_from([None, "0,1", "bad"]), st.sampled_from([None, "Running", "Succeeded"]))
def test_both_usages_read_at_once_are_each_usage(spec: dict, gpus: str | None, phase: str | None) -> None:
    pod: dict[str, Any] = {"metadata": {"annotations": {"railyard.dev/gpus": gpus} if gpus else {}}, "spec": spec,
                           "status": {"phase": phase} if phase else {}}
    assert pod_usages(pod) == (pod_usage(pod), pod_usage(pod, trusted=False))


@settings(max_examples=300)
@given(QUANTITY)
def test_a_remembered_quantity_parses_as_a_fresh_one(raw: Any) -> None:
    first, again = _outcome(parse_milli, raw), _outcome(parse_milli, raw)
    assert first == again == _outcome(_parse_milli, raw)


def test_an_unhashable_quantity_is_a_clear_error_not_a_type_error() -> None:
    with pytest.raises(ValueError, match=r"\['1'\]"):
        parse_milli(["1"])
