"""A placement pass ends only once every write it started has returned, whatever one of them raised:
a pass that ended with a status record still in flight would let the next pass solve onto the GPUs
that record is about to hold (operator/act/queue_pass.py)."""

from __future__ import annotations

import asyncio

import pytest
from railyard.operator.kube.client import Fenced

from tests.support.harness import rig
from tests.support.jobs import make_job


def test_leadership_lost_on_one_record_ends_the_pass_after_the_others_are_written():
    r = rig(nodes=4)
    r.submit(make_job("first", 1))
    r.submit(make_job("second", 1))
    original = r.api.patch_job_status

    async def patch(namespace, name, status, resource_version=None):
        if name == "first":
            raise Fenced("leadership term ended")
        for _ in range(5):  # the other record is slower: still in flight when the first fails
            await asyncio.sleep(0)
        return await original(namespace, name, status, resource_version)

    r.api.patch_job_status = patch
    with pytest.raises(Fenced):
        asyncio.run(r.loop.run_once(wait=False))
    stored = r.api.objects["trainingjobs"][("default", "second")]
    assert (stored.get("status") or {}).get("placement"), "the other record was written before the pass ended"
    assert r.state.jobs[("default", "second")].placement is not None, "and the state holds it for the next pass"
