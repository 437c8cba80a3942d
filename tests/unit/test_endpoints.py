"""Each job's rank DNS names: the operator writes its EndpointSlice (the Service has no selector, so
kube-controller-manager writes none) once every rank has an IP, at once when an address goes stale,
and after a short wait with the ranks that have one."""

from __future__ import annotations

import asyncio
import copy
import re

from hypothesis import given
from hypothesis import strategies as st
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.decide.rank_addresses import PARTIAL_WRITE_SECONDS, Address, worth_writing

from tests.support.harness import rig
from tests.support.jobs import make_job


def _slice(r, name: str) -> dict | None:
    return r.api.objects["endpointslices"].get(("default", name))


def _names(r, name: str) -> dict[str, str]:
    body = _slice(r, name)
    return {e["hostname"]: e["addresses"][0] for e in body["endpoints"]} if body else {}


def _ips(r) -> dict[str, str]:
    return {name: pod["status"]["podIP"] for (_, name), pod in r.api.objects["pods"].items()
            if (pod.get("status") or {}).get("podIP")}


def _slice_writes(r) -> list[str]:
    return [verb for verb, what in r.api.writes if what == "endpointslices"]


def test_a_gangs_names_are_written_once_when_every_rank_has_an_ip_and_the_service_selects_nothing():
    r = rig(nodes=4)
    r.submit(make_job("names", 3))
    r.running()
    r.step(3)
    ips = _ips(r)
    assert _names(r, "names") == {"names-0": ips["names-0"], "names-1": ips["names-1"], "names-2": ips["names-2"]}
    assert _slice_writes(r) == ["POST"], "one write for the gang, none for passes that change nothing"
    body = _slice(r, "names")
    assert body["metadata"]["labels"]["kubernetes.io/service-name"] == "names"
    label_value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # what the API server accepts
    assert all(label_value.match(v) and len(v) <= 63 for v in body["metadata"]["labels"].values())
    assert body["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert all(e["conditions"]["ready"] and e["targetRef"]["kind"] == "Pod" for e in body["endpoints"])
    service = r.api.objects["services"][("default", "names")]
    assert "selector" not in service["spec"], "no controller writes endpoints for it"


def test_ranks_still_starting_hold_the_write_back_until_the_short_wait_is_over():
    r = rig(nodes=4)
    r.submit(make_job("slow", 2))
    r.step()
    r.api.bind_released(lambda pod: pod["metadata"]["name"] == "slow-0")
    r.deliver()
    r.step(2)
    assert _slice(r, "slow") is None, "rank 1 has no IP yet: no partial write at once"
    r.clock.advance(PARTIAL_WRITE_SECONDS)
    r.step()
    assert list(_names(r, "slow")) == ["slow-0"], "after the wait, the ranks that are up resolve"
    r.api.bind_released()
    r.deliver()
    r.step()
    assert list(_names(r, "slow")) == ["slow-0", "slow-1"]
    assert _slice_writes(r) == ["POST", "PUT"]


def test_a_name_never_leads_to_a_pod_that_is_gone():
    r = rig(nodes=4)
    r.submit(make_job("moving", 2))
    r.running()
    r.step()
    before = _names(r, "moving")
    pod = copy.deepcopy(r.api.objects["pods"][("default", "moving-1")])
    r.api._remove("pods", ("default", "moving-1"))  # deleted under the gang (a drain, a kubectl delete)
    r.deliver()
    r.step()
    after = _names(r, "moving")
    assert before["moving-1"] == pod["status"]["podIP"] and after.get("moving-1") != pod["status"]["podIP"]
    assert after.get("moving-0") == before["moving-0"] or "moving-0" not in after


def test_a_new_operator_adopts_its_predecessors_slice_and_replaces_one_that_differs():
    r = rig(nodes=4)
    r.submit(make_job("handed", 2))
    r.running()
    r.step()
    successor = PlacementLoop(r.state, r.api, r.loop.ctx.settings, lambda: True, clock=r.clock)  # blank memory
    asyncio.run(successor.run_once())
    asyncio.run(successor.run_once())
    assert _slice_writes(r) == ["POST", "POST"], "found (a conflict) saying the same: kept, then left alone"
    stored = r.api.objects["endpointslices"][("default", "handed")]
    stored["endpoints"][0]["addresses"] = ["10.9.9.9"]  # changed behind the operators' backs
    third = PlacementLoop(r.state, r.api, r.loop.ctx.settings, lambda: True, clock=r.clock)
    asyncio.run(third.run_once())
    assert _slice_writes(r) == ["POST", "POST", "POST", "PUT"]
    assert "10.9.9.9" not in _names(r, "handed").values()


def test_a_finishing_gang_costs_no_write():
    r = rig(nodes=4)
    r.submit(make_job("brief", 2))
    r.running()
    r.step()
    r.succeed_all()
    r.step(3)
    assert r.reason("brief", "Succeeded") is not None
    assert _slice_writes(r) == ["POST"]


_ADDRESS = st.builds(Address, st.sampled_from(["j-0", "j-1", "j-2"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]),
                     st.just("n"), st.just("p"), st.just("u"))


@given(st.lists(_ADDRESS, max_size=3, unique=True), st.one_of(st.none(), st.lists(_ADDRESS, max_size=3, unique=True)),
       st.floats(0, 20))
def test_what_is_written_is_never_stale_and_never_the_same_twice(current, written, waited):
    now, before = tuple(current), None if written is None else tuple(written)
    write = worth_writing(now, before, 3, waited)
    if now == before:
        assert not write
    elif before is not None and not set(before) <= set(now):
        assert write, "a written address that went away is rewritten at once"
    elif len(now) == 3:
        assert write
    else:
        assert write == (bool(now) and waited >= PARTIAL_WRITE_SECONDS)


def test_a_gang_larger_than_one_slice_holds_gets_as_many_slices_and_a_shrink_empties_the_extra(monkeypatch):
    """The API refuses an EndpointSlice of more than 1,000 endpoints: a 1,024-replica gang's names were
    never written. Here a slice holds 2, so 3 ranks take two."""
    from railyard.operator.decide import rank_addresses as decide_endpoints

    monkeypatch.setattr(decide_endpoints, "MAX_ENDPOINTS", 2)
    r = rig(nodes=4)
    r.submit(make_job("wide", 3))
    r.running()
    r.step(2)
    first, second = _slice(r, "wide"), _slice(r, "wide.1")
    assert [e["hostname"] for e in first["endpoints"]] == ["wide-0", "wide-1"]
    assert [e["hostname"] for e in second["endpoints"]] == ["wide-2"]
    assert second["metadata"]["labels"]["kubernetes.io/service-name"] == "wide"
    assert _slice_writes(r) == ["POST", "POST"], "written once, not again on passes that change nothing"
    job = r.state.jobs[("default", "wide")]
    written = r.loop.ctx.memories.recall(job).endpoints
    shrunk = decide_endpoints.endpoint_slices(job, written[:1], decide_endpoints.slice_count(written))
    assert [len(b["endpoints"]) for b in shrunk] == [1, 0], "the second slice is emptied, not left behind"
