"""How a pod of a workload Railyard does not own tells its gang, rank and size (topology/cluster/workload_groups.py):
each kind by its own labels, and the owners' specs read for the size and the first ranks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from railyard.operator.decide.adoption import ranked
from railyard.topology.cluster.workload_groups import (
    WorkloadKind,
    jobset_offsets,
    member_of,
    pytorchjob_offsets,
)


def _pytorch_pod(kind: str, index: int, uid: str = "u1") -> dict:
    return {"metadata": {"name": f"bert-{kind}-{index}",
                         "labels": {"training.kubeflow.org/job-name": "bert",
                                    "training.kubeflow.org/replica-type": kind,
                                    "training.kubeflow.org/replica-index": str(index)},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert",
                                              "uid": uid, "controller": True}]}}


@given(masters=st.integers(0, 1), workers=st.integers(0, 6), capitalised=st.booleans())
def test_a_pytorchjobs_ranks_are_the_master_then_the_workers_by_replica_index_one_each(masters, workers,
                                                                                         capitalised):
    size, offsets = pytorchjob_offsets({"spec": {"pytorchReplicaSpecs": {
        **({"Master": {"replicas": masters}} if masters else {}), "Worker": {"replicas": workers}}}})
    assert size == masters + workers
    pods = [_pytorch_pod("Master" if capitalised else "master", 0)] * masters + \
        [_pytorch_pod("Worker" if capitalised else "worker", i) for i in range(workers)]
    members = {p["metadata"]["name"]: member_of(p) for p in pods}
    assert all(m is not None and m.kind is WorkloadKind.PYTORCH_JOB and m.group == "pytorchjob/u1"
               for m in members.values())
    names = ranked(members, offsets)  # type: ignore[arg-type]
    assert names is not None and len(names) == size
    assert names == [*(["bert-master-0"] if masters else []), *(f"bert-worker-{i}" for i in range(workers))] or \
        (capitalised and names == [*(["bert-Master-0"] if masters else []),
                                   *(f"bert-Worker-{i}" for i in range(workers))])


def test_a_pod_of_a_pytorchjob_under_another_controller_or_of_another_replica_type_is_no_gang_of_it():
    chief = _pytorch_pod("chief", 0)
    assert member_of(chief) is None
    foreign = _pytorch_pod("worker", 0)
    foreign["metadata"]["ownerReferences"][0]["kind"] = "TFJob"
    member = member_of(foreign)
    assert member is None or member.kind is not WorkloadKind.PYTORCH_JOB


def test_a_jobsets_jobs_start_where_the_previous_ones_end():
    size, offsets = jobset_offsets({"spec": {"replicatedJobs": [
        {"name": "a", "replicas": 2, "template": {"spec": {"parallelism": 3}}},
        {"name": "b", "replicas": 1, "template": {"spec": {"parallelism": 4}}}]}})
    assert size == 10 and offsets == {0: 0, 1: 3, 2: 6}
