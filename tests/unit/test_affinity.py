"""Required pod anti-affinity and topology spread, as kube-scheduler would judge the chosen nodes."""

from __future__ import annotations

from railyard.topology.cluster.affinity import PodInfo, node_limits, selector_matches, template_problem
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import snapshot

TOR_KEY = "topology.railyard.dev/tor"


def anti(selector: dict, key: str = "kubernetes.io/hostname") -> dict:
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": key}]}}, "containers": [{"name": "c"}]}


def test_selectors_follow_label_selector_semantics():
    labels = {"app": "db", "tier": "a"}
    assert selector_matches({"matchLabels": {"app": "db"}}, labels)
    assert selector_matches({}, labels) and not selector_matches(None, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                                  {"key": "gone", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}, labels)


def test_anti_affinity_against_an_existing_pod_excludes_its_node_or_its_whole_domain():
    snap = snapshot()
    node = snap.nodes[0]
    pods = [PodInfo("ml", {"app": "db"}, node.name)]
    by_host = node_limits(anti({"matchLabels": {"app": "db"}}), "ml", {"app": "train"}, pods, snap.nodes)
    assert set(by_host.rejected) == {node.name}
    by_tor = node_limits(anti({"matchLabels": {"app": "db"}}, TOR_KEY), "ml", {"app": "train"}, pods, snap.nodes)
    assert set(by_tor.rejected) == {n.name for n in snap.nodes if n.tor == node.tor}
    other_ns = node_limits(anti({"matchLabels": {"app": "db"}}), "elsewhere", {"app": "train"}, pods, snap.nodes)
    assert not other_ns.rejected, "a term without namespaces applies to the pod's own namespace only"
    request = GangRequest("t", 4, 8, pod_spec=anti({"matchLabels": {"app": "db"}}, TOR_KEY))
    decision = solve(snap, request, by_tor)
    assert decision.placement is not None
    assert all(snap.node(r.node).tor != node.tor for r in decision.placement.replicas)


def test_self_anti_affinity_on_hostname_puts_one_replica_per_node():
    snap = snapshot(leaves=1, tors=1, nodes=4)
    spec = anti({"matchLabels": {"app": "train"}})
    limits = node_limits(spec, "ml", {"app": "train"}, [], snap.nodes)
    decision = solve(snap, GangRequest("t", 4, 2, pod_spec=spec), limits)
    assert len({r.node for r in decision.placement.replicas}) == 4
    assert solve(snap, GangRequest("t", 5, 2, pod_spec=spec), limits).placement is None


def test_hostname_spread_caps_replicas_per_node_counting_existing_pods():
    snap = snapshot(leaves=1, tors=1, nodes=4)
    spec = {"topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
                                           "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": "train"}}}],
            "containers": [{"name": "c"}]}
    crowded = snap.nodes[0].name
    pods = [PodInfo("ml", {"app": "train"}, crowded)] * 2
    limits = node_limits(spec, "ml", {"app": "train"}, pods, snap.nodes)
    assert crowded in limits.rejected  # 2 already there, minimum 0, maxSkew 2: no room
    assert all(limits.caps[n.name] == 2 for n in snap.nodes[1:])
    decision = solve(snap, GangRequest("t", 6, 1, pod_spec=spec), limits)
    per_node = {}
    for r in decision.placement.replicas:
        per_node[r.node] = per_node.get(r.node, 0) + 1
    assert crowded not in per_node and max(per_node.values()) <= 2


def test_rules_among_the_gangs_own_pods_on_coarser_keys_are_refused_with_the_field():
    problem = template_problem(anti({"matchLabels": {"app": "train"}}, TOR_KEY), {"app": "train"})
    assert problem and "podAntiAffinity" in problem and TOR_KEY in problem
    spread = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                             "labelSelector": {"matchLabels": {"app": "train"}}}]}
    assert "topologySpreadConstraints[0]" in (template_problem(spread, {"app": "train"}) or "")
    assert template_problem(anti({"matchLabels": {"app": "db"}}, TOR_KEY), {"app": "train"}) is None
