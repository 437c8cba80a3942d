"""Labels -> model: the native scheme, presets, exclusions with reasons, GPU accounting from pods."""

from __future__ import annotations

import copy

import pytest
from railyard.topology.cluster.labels import resolve_scheme
from railyard.topology.cluster.nodes import build_snapshot, node_from_object

from tests.support.clusters import profile_nodes

BASE = profile_nodes(spines=1, leaves=1, tors=1, nodes=1)[0]


def with_labels(labels: dict, drop: tuple[str, ...] = (), **status) -> dict:
    node = copy.deepcopy(BASE)
    for key in drop:
        node["metadata"]["labels"].pop(key)
    node["metadata"]["labels"].update(labels)
    node["status"].update(status)
    return node


def test_native_labels_are_read():
    node = node_from_object(BASE)
    assert (node.spine, node.leaf, node.tor) == ("spine-0", "leaf-0-0", "tor-0-0-0")
    assert node.rails == tuple(range(8)) and node.numa == (0, 0, 0, 0, 1, 1, 1, 1)


@pytest.mark.parametrize(("labels", "drop", "reason"), [
    ({}, ("topology.railyard.dev/tor",), "missing tor label topology.railyard.dev/tor"),
    ({"topology.railyard.dev/gpu-rail": "0.1.2"}, (), "has 3 entries but the node has 8 GPUs"),
    ({"topology.railyard.dev/gpu-numa": "a.b.c.d.e.f.g.h"}, (), "expected dot-separated integers"),
])
def test_bad_labels_exclude_the_node_with_a_reason(labels, drop, reason):
    snap = build_snapshot([with_labels(labels, drop)])
    assert not snap.nodes
    assert reason in snap.excluded[0].reason


def test_not_ready_cordoned_and_gpu_less_nodes_are_excluded():
    not_ready = with_labels({}, conditions=[{"type": "Ready", "status": "False"}])
    cordoned = copy.deepcopy(BASE)
    cordoned["spec"]["unschedulable"] = True
    no_gpu = copy.deepcopy(BASE)
    del no_gpu["status"]["allocatable"]["nvidia.com/gpu"]
    reasons = [e.reason for e in build_snapshot([not_ready, cordoned, no_gpu]).excluded]
    assert sorted(reasons) == sorted(["not Ready", "cordoned (spec.unschedulable)", "no nvidia.com/gpu allocatable"])


@pytest.mark.parametrize(("preset", "labels", "expected"), [
    ("aws", {"topology.k8s.aws/network-node-layer-1": "nn-top", "topology.k8s.aws/network-node-layer-2": "nn-mid",
             "topology.k8s.aws/network-node-layer-3": "nn-low"}, ("nn-top", "nn-mid", "nn-low")),
    ("gke", {"cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "s1"},
     ("cluster", "b1", "b1/s1")),
    ("topograph-v2", {"network.topology.nvidia.com/core": "c", "network.topology.nvidia.com/spine": "s",
                      "network.topology.nvidia.com/leaf": "l"}, ("c", "s", "l")),
    ("topograph", {"fabric.topograph.run/tier-3": "t3", "fabric.topograph.run/tier-2": "t2",
                   "fabric.topograph.run/tier-1": "t1"}, ("t3", "t2", "t1")),
])
def test_presets_map_onto_the_same_model(preset, labels, expected):
    node = copy.deepcopy(BASE)
    node["metadata"]["labels"] = {"kubernetes.io/hostname": "n", **labels}
    model = node_from_object(node, resolve_scheme(preset))
    assert (model.spine, model.leaf, model.tor) == expected
    assert model.rails == tuple(range(8))  # no rail labels: GPU i on rail i


def test_gfd_supplies_gpu_count_and_clique():
    node = copy.deepcopy(BASE)
    del node["status"]["allocatable"]["nvidia.com/gpu"]
    node["metadata"]["labels"] = {"topology.k8s.aws/network-node-layer-1": "a",
                                  "topology.k8s.aws/network-node-layer-2": "b",
                                  "topology.k8s.aws/network-node-layer-3": "c",
                                  "nvidia.com/gpu.count": "4", "nvidia.com/gpu.clique": "cl-1"}
    model = node_from_object(node, resolve_scheme("aws,gfd"))
    assert model.gpu_count == 4 and model.nvlink_domain == "cl-1"


def test_unknown_preset_is_named():
    with pytest.raises(ValueError, match="unknown label preset 'slurm'"):
        resolve_scheme("native,slurm")


def _pod(node, gpus, annotation=None, phase="Running", bound=True):
    meta = {"name": "p", "annotations": {"railyard.dev/gpus": annotation} if annotation else {}}
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if bound:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_gpu_accounting_from_pods():
    name = BASE["metadata"]["name"]
    pods = [
        _pod(name, 4, annotation="4,5,6,7"),          # Railyard pod: its exact GPUs
        _pod(name, 2),                                # other pod: lowest free indices
        _pod(name, 8, phase="Succeeded"),             # finished: holds nothing
        _pod(name, 1, annotation="3", bound=False),   # gated Railyard pod pinned to the node: counted
    ]
    snap = build_snapshot([BASE], pods)
    assert snap.used[name] == frozenset({0, 1, 3, 4, 5, 6, 7})
    assert snap.free(snap.nodes[0]) == (2,)
