"""Priority is the admin's (issue 21): a job's place in the queue is its PriorityClass's value; a
tenant's own number means nothing; a class that does not exist holds the job back, by name."""

from __future__ import annotations

from typing import Any

from railyard.operator.decide.priority import Priority, PriorityClassView, resolve

from tests.support.harness import Rig, rig
from tests.support.jobs import make_job


def priority_class(rig_: Rig, name: str, value: int, global_default: bool = False) -> None:
    rig_.api._store("priorityclasses", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                        "metadata": {"name": name}, "value": value,
                                        "globalDefault": global_default}, "ADDED")
    rig_.deliver()


def job(name: str, replicas: int, class_name: str | None = None, **spec: Any) -> dict[str, Any]:
    body = make_job(name, replicas, **spec)
    if class_name:
        body["spec"]["priorityClassName"] = class_name
    return body


def test_resolve_names_the_class_or_the_global_default_or_zero():
    classes = {"high": PriorityClassView("high", 1000), "base": PriorityClassView("base", 10, global_default=True)}
    assert resolve("high", classes) == Priority(1000, "high")
    assert resolve(None, classes) == Priority(10, "base")
    assert resolve(None, {}) == Priority(0, None)
    assert resolve("nope", classes) is None


def test_the_higher_class_goes_first_whatever_number_a_tenant_writes():
    r = rig(nodes=2)
    priority_class(r, "research", 100)
    priority_class(r, "production", 1000)
    r.submit(job("tenant", 2, "research", priority=2_000_000_000))  # stored before the API refused it: ignored
    r.submit(job("prod", 2, "production"))
    r.step()
    assert r.reason("prod") == "Released"
    assert r.reason("tenant") in ("Unschedulable", "Reserving")


def test_pods_carry_the_jobs_class():
    r = rig(nodes=1)
    priority_class(r, "production", 1000)
    r.submit(job("prod", 1, "production"))
    r.step()
    pods = [p for (_, name), p in r.api.objects["pods"].items() if name.startswith("prod")]
    assert pods and {p["spec"].get("priorityClassName") for p in pods} == {"production"}


def test_a_missing_class_holds_the_job_with_its_name_until_an_admin_creates_it():
    r = rig(nodes=1)
    r.submit(job("waits", 1, "gold"))
    r.step()
    placed = r.condition("waits", "Placed") or {}
    assert (placed.get("reason"), placed.get("status")) == ("PriorityClassNotFound", "False")
    assert "spec.priorityClassName='gold'" in placed["message"]
    assert not r.pods()
    priority_class(r, "gold", 10)
    r.step()
    assert r.reason("waits") == "Released"
