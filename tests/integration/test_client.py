"""The operator's async client against the real API server: what a write returns, how refusals come
back (status and body), the fence, and a client used from more than one event loop."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from railyard.operator.kube.client import ApiException, Fenced, KubeApi

pytestmark = pytest.mark.e2e


def _config_map(namespace: str, name: str) -> dict:
    return {"metadata": {"namespace": namespace, "name": name}, "data": {"k": "0"}}


def test_writes_return_what_was_stored_and_refusals_carry_status_and_reason(kubeconfig, core, namespace):
    api = KubeApi(workers=4, kubeconfig=kubeconfig, user_agent="railyard-test/client")
    name = f"cm-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        created, stored = await api.create("configmaps", _config_map(namespace, name))
        assert created and stored is not None and stored["metadata"]["uid"]
        again, existing = await api.create("configmaps", _config_map(namespace, name))
        assert not again and existing is not None and existing["metadata"]["uid"] == stored["metadata"]["uid"]
        patched = await api.arequest("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                                     {"data": {"k": "1"}}, "application/merge-patch+json")
        assert patched["data"] == {"k": "1"}
        with pytest.raises(ApiException) as missing:
            await api.arequest("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}-absent")
        assert missing.value.status == 404 and "not found" in (missing.value.body or "")
        assert await api.replace("configmaps", _config_map(namespace, f"{name}-absent")) is None
        await api.aclose()

    asyncio.run(scenario())
    assert core.read_namespaced_config_map(name, namespace).data == {"k": "1"}


def test_a_fenced_client_sends_no_write_but_still_reads(kubeconfig, core, namespace):
    api = KubeApi(workers=2, kubeconfig=kubeconfig)
    api.fence = lambda: False
    name = f"cm-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        with pytest.raises(Fenced):
            await api.create("configmaps", _config_map(namespace, name))
        listed = await api.arequest("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert all(item["metadata"]["name"] != name for item in listed["items"])
        assert await api.drain(0.1) == 0
        await api.aclose()

    asyncio.run(scenario())
    assert all(cm.metadata.name != name for cm in core.list_namespaced_config_map(namespace).items)


def test_a_write_queued_for_a_connection_is_fenced_when_it_gets_one(kubeconfig, core, namespace):
    """The fence is the last step before sending: a write that waited behind others while the term
    ended is refused, not sent on an old check."""
    api = KubeApi(workers=1, kubeconfig=kubeconfig)
    leading = [True]
    api.fence = lambda: leading[0]
    name = f"cm-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        # A 2 s watch of an empty collection holds the one connection slot.
        busy = asyncio.ensure_future(api.arequest("GET", f"/api/v1/namespaces/{namespace}/secrets",
                                                  query=[("watch", "true"), ("timeoutSeconds", "2")]))
        await asyncio.sleep(0.3)
        write = asyncio.ensure_future(api.create("configmaps", _config_map(namespace, name)))
        await asyncio.sleep(0.3)
        leading[0] = False  # the term ends while the write waits for the slot
        with pytest.raises(Fenced):
            await write
        await busy
        assert await api.drain(1.0) == 0
        await api.aclose()

    asyncio.run(scenario())
    assert all(cm.metadata.name != name for cm in core.list_namespaced_config_map(namespace).items)


def test_a_write_whose_caller_is_cancelled_is_sent_whole_and_drained(kubeconfig, core, namespace):
    """A leader stepping down cancels its tasks, then drains: a write already decided still lands, and
    `drain` waits for it (as it did when writes ran in threads)."""
    api = KubeApi(workers=2, kubeconfig=kubeconfig)
    name = f"cm-{uuid.uuid4().hex[:6]}"

    async def scenario() -> int:
        write = asyncio.ensure_future(api.create("configmaps", _config_map(namespace, name)))
        while not api._writes:  # sent: counted as in flight
            await asyncio.sleep(0)
        write.cancel()
        left = await api.drain(10.0)
        await api.aclose()
        return left

    assert asyncio.run(scenario()) == 0
    assert core.read_namespaced_config_map(name, namespace).data == {"k": "0"}


def test_a_token_kubeconfig_authenticates_the_async_requests(identity):
    """The chart's ServiceAccount (a bearer token, no client certificate): the API server must see that
    account, not system:anonymous."""
    api = KubeApi(workers=1, kubeconfig=identity.kubeconfig)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}

    async def whoami() -> str:
        try:
            answer = await api.arequest("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
        finally:
            await api.aclose()
        return answer["status"]["userInfo"]["username"]

    assert asyncio.run(whoami()).startswith("system:serviceaccount:")


def test_one_client_serves_one_event_loop_after_another(kubeconfig, namespace):
    """The operator's loop and the report server's are different loops sharing nothing; a test that
    calls asyncio.run twice is the same case."""
    api = KubeApi(workers=2, kubeconfig=kubeconfig)
    for i in range(2):
        created, _ = asyncio.run(api.create("configmaps", _config_map(namespace, f"cm-loop-{i}")))
        assert created
