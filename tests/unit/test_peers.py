"""The peer harness's pure half: each peer's objects for a job, and the peer-agnostic reader of where
pods landed (hack/bench/peers/compare.py runs them on the rig)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.peers.translators import (
    INDEX_ANNOTATION,
    JOB_LABEL,
    PeerJob,
    kueue_cluster_objects,
    kueue_objects,
    markdown_table,
    naive_objects,
    native_gang_objects,
    on_common_jobs,
    railyard_objects,
    read_placements,
    stream,
    summarise,
    volcano_cluster_objects,
    volcano_objects,
)
from railyard.topology.api.job import TrainingJob
from railyard.topology.cluster.labels import LABEL_LEAF, LABEL_SPINE, LABEL_TOR

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
JOB = PeerJob("j001-4x8", 4, 8, "tor", None)


def test_railyard_translation_is_a_valid_training_job():
    [obj] = railyard_objects(JOB)
    job = TrainingJob.model_validate({**obj, "metadata": {**obj["metadata"], "namespace": "bench"}})
    assert job.spec.replicas == 4 and job.spec.gpus_per_replica == 8
    assert job.spec.topology.required_tier == "tor"


def test_native_gang_translation_carries_the_gang_and_the_required_tier_only():
    group, *pods = native_gang_objects(JOB)
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}},
                             "schedulingConstraints": {"topology": [{"key": LABEL_TOR}]}}
    assert [p["spec"]["schedulingGroup"] for p in pods] == [{"podGroupName": "j001-4x8"}] * 4
    assert [p["metadata"]["annotations"][INDEX_ANNOTATION] for p in pods] == ["0", "1", "2", "3"]
    preferred, *_ = native_gang_objects(PeerJob("j", 64, 8, None, "tor"))
    assert "schedulingConstraints" not in preferred["spec"]  # no preferred tier upstream: n/a


def test_naive_translation_is_required_pod_affinity_on_the_tor_label():
    pods = naive_objects(JOB)
    assert len(pods) == 4
    affinity = pods[0]["spec"]["affinity"]["podAffinity"]
    [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"labelSelector": {"matchLabels": {JOB_LABEL: "j001-4x8"}}, "topologyKey": LABEL_TOR}


def test_kueue_translation_is_a_suspended_queued_job_with_the_tier_as_tas_topology():
    [job] = kueue_objects(JOB)
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "train"
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"kueue.x-k8s.io/podset-required-topology": LABEL_TOR}
    [preferred] = kueue_objects(PeerJob("j", 64, 8, None, "tor"))
    assert preferred["spec"]["template"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": LABEL_TOR}
    topology, flavor, queue, local = kueue_cluster_objects(16384, "bench")
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [LABEL_SPINE, LABEL_LEAF, LABEL_TOR,
                                                                       "kubernetes.io/hostname"]
    assert flavor["spec"]["topologyName"] == "railyard"
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 16384
    assert local["metadata"]["namespace"] == "bench" and local["spec"]["clusterQueue"] == "gpus"


def test_volcano_translation_is_a_gang_vcjob_with_the_tier_as_network_topology():
    [job] = volcano_objects(JOB)
    assert (job["apiVersion"], job["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    spec = job["spec"]
    assert spec["schedulerName"] == "volcano" and spec["queue"] == "default" and spec["minAvailable"] == 4
    assert spec["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    [task] = spec["tasks"]
    assert task["replicas"] == task["minAvailable"] == 4
    assert task["template"]["metadata"]["labels"] == {JOB_LABEL: "j001-4x8"}
    [preferred] = volcano_objects(PeerJob("j", 64, 8, None, "tor"))
    assert preferred["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}
    [single] = volcano_objects(PeerJob("j", 1, 4, None, None))
    assert "networkTopology" not in single["spec"]


def test_volcano_hypernodes_follow_the_node_labels():
    nodes = [_node("a", "s0", "l0", "t0"), _node("b", "s0", "l0", "t1"), _node("c", "s0", "l1", "t2"),
             {"metadata": {"name": "unlabelled", "labels": {}}}]
    by_name = {h["metadata"]["name"]: h["spec"] for h in volcano_cluster_objects(nodes)}
    assert sorted(by_name) == ["l0", "l1", "s0", "t0", "t1", "t2"]
    assert by_name["t0"] == {"tier": 1, "tierName": "tor", "members": [
        {"type": "Node", "selector": {"labelMatch": {"matchLabels": {LABEL_TOR: "t0"}}}}]}
    assert by_name["l0"]["tier"] == 2 and [m["selector"]["exactMatch"]["name"] for m in by_name["l0"]["members"]] \
        == ["t0", "t1"]
    assert by_name["s0"]["tier"] == 3 and [m["selector"]["exactMatch"]["name"] for m in by_name["s0"]["members"]] \
        == ["l0", "l1"]


def test_the_stream_is_reproducible_and_oversubscribes_superpod_2k():
    jobs = stream(150, 11)
    assert jobs == stream(150, 11)
    assert sum(j.replicas * j.gpus for j in jobs) > 2048 * 8


def _node(name: str, spine: str, leaf: str, tor: str) -> dict:
    return {"metadata": {"name": name, "labels": {LABEL_SPINE: spine, LABEL_LEAF: leaf, LABEL_TOR: tor}}}


def _pod(job: str, index: int, node: str | None) -> dict:
    return {"metadata": {"name": f"{job}-{index}-x", "labels": {JOB_LABEL: job},
                         "annotations": {INDEX_ANNOTATION: str(index)}},
            "spec": {"nodeName": node} if node else {}}


def test_reader_counts_domains_partial_gangs_and_ring_cost_from_bound_pods_only():
    nodes = [_node("a", "s0", "l0", "t0"), _node("b", "s0", "l0", "t0"), _node("c", "s0", "l1", "t2")]
    jobs = [PeerJob("g", 3, 8, None, None), PeerJob("p", 2, 8, None, None)]
    pods = [_pod("g", 2, "c"), _pod("g", 0, "a"), _pod("g", 1, "b"), _pod("p", 0, "a"), _pod("p", 1, None)]
    placements = read_placements(jobs, pods, nodes)
    assert placements["g"] == {"replicas": 3, "gpus": 8, "bound": 3, "nodes": 3, "tors": 2, "leaves": 2,
                               "spines": 1, "ring_cost": 1 + 3 + 3}  # a-b one TOR, b-c and c-a across leaves
    assert placements["p"]["bound"] == 1
    summary = summarise(placements)
    assert summary["jobs_placed"] == 1 and summary["partially_bound_gangs"] == 1 and summary["gpus_placed"] == 24
    assert "| peer |" in markdown_table({"x": summary})


@pytest.mark.parametrize("peer", ["railyard", "kube-scheduler-gang", "kueue-tas", "volcano", "naive-podaffinity"])
def test_reader_on_pod_lists_recorded_on_the_rig(peer):
    recorded = json.loads((RECORDED / f"{peer}.json").read_text())
    jobs = [PeerJob(**j) for j in recorded["jobs"]]
    placements = read_placements(jobs, recorded["pods"], recorded["nodes"])
    assert {name: p["bound"] for name, p in placements.items()} == recorded["bound"]
    for job in jobs:  # a gang scheduler never leaves a gang partly bound
        if peer != "naive-podaffinity":
            assert placements[job.name]["bound"] in (0, job.replicas)


def test_like_for_like_figures_cover_only_jobs_every_peer_placed_whole():
    jobs = [PeerJob("a", 2, 8, None, None), PeerJob("b", 2, 8, None, None)]
    whole = {"bound": 2, "tors": 1, "ring_cost": 2}
    by_peer = {"x": {"a": whole, "b": whole},
               "y": {"a": {**whole, "tors": 2, "ring_cost": 4}, "b": {**whole, "bound": 1}}}
    assert on_common_jobs(jobs, by_peer) == {"jobs": 1, "x": {"mean_tors_spanned": 1, "mean_ring_cost": 2},
                                             "y": {"mean_tors_spanned": 2, "mean_ring_cost": 4}}
