"""Topologies with N levels: a definition from label keys, the exact domain choice over any depth
(against the MILP), requiredTier/preferredTier by level name, and the NVLink-domain level."""

from __future__ import annotations

from dataclasses import replace

import pytest
from bench.core.exact import counts_weight, optimum
from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.labels import (
    LABEL_GPU_CLIQUE,
    LABEL_LEAF,
    LABEL_SPINE,
    LABEL_TOR,
    parse_levels,
    scheme_for,
)
from railyard.topology.cluster.levels import LevelError, Levels
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.nodes import build_snapshot, node_from_object
from railyard.topology.solver.domain_tree import build_tree, counts_of
from railyard.topology.solver.domains import objective_for, select_best
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import fabric_node, profile_nodes

ZONE = "example.com/zone"
FIVE = f"zone={ZONE},spine={LABEL_SPINE},leaf={LABEL_LEAF},tor={LABEL_TOR}"


def zoned(nodes: list[dict], zone_of_spine) -> list[dict]:
    for node in nodes:
        labels = node["metadata"]["labels"]
        labels[ZONE] = zone_of_spine(labels[LABEL_SPINE])
    return nodes


# --- the definition ----------------------------------------------------------------------------


def test_a_definition_names_levels_top_to_bottom():
    scheme = parse_levels(FIVE + ",nvlink")
    assert scheme.levels.top_down == ("zone", "spine", "leaf", "tor", "nvlink")
    assert scheme.levels.index("zone") == 5 and scheme.levels.index("nvlink") == 1 and scheme.levels.index("node") == 0
    assert scheme.nvlink_domain == LABEL_GPU_CLIQUE and scheme.gpu_rail  # GPU labels kept from the preset


def test_fewer_than_three_levels_collapse_at_the_top():
    scheme = scheme_for("native", "block=b.example/block,rack=b.example/rack")
    assert scheme.levels.top_down == ("spine", "block", "rack")
    node = node_from_object({
        "metadata": {"name": "n", "labels": {"b.example/block": "b1", "b.example/rack": "r1"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}},
        scheme)
    assert (node.spine, node.leaf, node.tor) == ("cluster", "b1", "r1")  # the missing top level is one domain


@pytest.mark.parametrize(("definition", "message"), [
    ("zone", "'zone': expected name=labelKey"),
    ("nvlink,spine=a,leaf=b,tor=c", "'nvlink': expected name=labelKey (and 'nvlink' only last)"),
    ("Zone=a,spine=b,leaf=c,tor=d", "level name 'Zone'"),
    ("tor=a,leaf=b,tor=c", "names must be unique"),
    ("node=a,leaf=b,tor=c", "not 'node'"),
    ("", "empty definition"),
])
def test_bad_definitions_say_what_is_wrong(definition, message):
    with pytest.raises(LevelError) as err:
        parse_levels(definition)
    assert message in str(err.value)


def test_a_node_without_a_level_label_is_excluded_naming_the_level():
    scheme = parse_levels(FIVE)
    nodes = profile_nodes(spines=2, leaves=1, tors=1, nodes=1)
    zoned(nodes[:1], lambda spine: "z0")
    snap = build_snapshot(nodes, (), scheme)
    assert [e.reason for e in snap.excluded] == [f"missing zone label {ZONE}"]


def test_unknown_and_inverted_tiers_name_the_field_and_the_levels():
    levels = Levels(("zone", "spine", "leaf", "tor"))
    with pytest.raises(LevelError, match=r"requiredTier: 'rack' is not a level .*zone, spine, leaf, tor, node"):
        levels.check_tiers("rack", None)
    with pytest.raises(LevelError, match="preferredTier 'zone' is above requiredTier 'spine'"):
        levels.check_tiers("spine", "zone")
    snap = build_snapshot(zoned(profile_nodes(spines=1), lambda s: "z0"), (), parse_levels(FIVE))
    decision = solve(snap, GangRequest("j", 2, 8, required_tier="rack"))
    assert not decision.placed and "'rack' is not a level" in decision.reason


# --- placement over five levels -----------------------------------------------------------------


def five_level_snapshot() -> Snapshot:
    """Zone z0: spine-0, spine-1 with 4 free nodes each; zone z1: spine-2 with 6 free nodes (of 8)."""
    in_z0 = ("spine-0", "spine-1")
    nodes = zoned(profile_nodes(spines=3, leaves=1, tors=2, nodes=4), lambda spine: "z0" if spine in in_z0 else "z1")
    snap = build_snapshot(nodes, (), parse_levels(FIVE))
    spine = {n.name: n.spine for n in snap.nodes}
    s0_s1_busy = [n for n in sorted(spine) if spine[n] in in_z0][::2]
    s2_busy = [n for n in sorted(spine) if spine[n] == "spine-2"][:2]
    return snap.allocate((n, range(8)) for n in s0_s1_busy + s2_busy)


def test_the_gang_stays_in_one_zone_when_one_holds_it():
    snap = five_level_snapshot()
    decision = solve(snap, GangRequest("j", 8, 8))
    assert decision.placement is not None
    zones = {snap.node(r.node).upper for r in decision.placement.replicas}
    assert len(zones) == 1
    assert dict(decision.placement.domains)["zone"] == 1 and decision.placement.spines == 2


def test_required_zone_and_preferred_spine_by_name():
    snap = five_level_snapshot()
    too_big = solve(snap, GangRequest("j", 9, 8, required_tier="spine"))
    assert not too_big.placed and too_big.reason.startswith("requiredTier spine: largest spine (spine-2) has 6")
    fits = solve(snap, GangRequest("j", 7, 8, required_tier="zone", preferred_tier="spine"))
    assert fits.placement is not None and dict(fits.placement.domains)["zone"] == 1


# --- exactness over any depth -------------------------------------------------------------------


@st.composite
def deep_fabrics(draw):
    """Ragged five-level trees (zone above spine), with NVLink domains inside TORs or none."""
    nvlink = draw(st.booleans())
    slots = []
    for z in range(draw(st.integers(1, 2))):
        for s in range(draw(st.integers(1, 2))):
            for lf in range(draw(st.integers(1, 2))):
                for t in range(draw(st.integers(1, 3))):
                    for n in range(draw(st.integers(1, 3))):
                        node = replace(fabric_node(z * 10 + s, lf, t, n), upper=(f"z{z}",))
                        if nvlink:
                            node = replace(node, nvlink_domain=f"c{draw(st.integers(0, 1))}")
                        slots.append((node, draw(st.integers(0, 4))))
    total = sum(c for _, c in slots)
    need = draw(st.integers(1, max(1, total)))
    empty = frozenset(n.name for n, _ in slots if draw(st.booleans()))
    return Levels(("zone", "spine", "leaf", "tor"), nvlink), slots, need, empty


@settings(max_examples=120, deadline=None)
@given(deep_fabrics(), st.integers(0, 5))
def test_selection_over_five_levels_matches_the_milp(fabric, preferred_level):
    levels, slots, need, empty = fabric
    preferred_level = min(preferred_level, levels.depth)
    best = optimum(slots, need, lowest_level=preferred_level, empty=empty, levels=levels)
    if sum(c for _, c in slots) < need:
        assert best is None
        return
    objective = objective_for(preferred_level or None, levels.depth)
    tree = build_tree(slots, levels.depth, free_gpus=lambda n: 8 if n.name in empty else 4, levels=levels)
    selection = select_best(tree, need, objective, levels)
    assert sum(k for _, k in selection.takes) == need
    assert selection.counts == counts_of(selection.takes, levels)
    assert counts_weight(selection.counts, objective.lowest_level) == best


def test_fewest_nvlink_domains_before_fewest_nodes():
    # One TOR. NVLink domain A: four nodes of 1 slot; B and C: one node of 3 slots each. Seven
    # replicas: fewest nodes is B + C + one of A (3 domains); fewest NVLink domains is A + B (5 nodes).
    nodes = [(replace(fabric_node(0, 0, 0, i), nvlink_domain="A"), 1) for i in range(4)]
    nodes += [(replace(fabric_node(0, 0, 0, 4 + i), nvlink_domain=d), 3) for i, d in enumerate("BC")]
    flat = Levels()
    by_nodes = select_best(build_tree(nodes, 3, levels=flat), 7, objective_for(None), flat)
    assert len({n.nvlink_domain for n, _ in by_nodes.takes}) == 3
    with_nvlink = Levels(nvlink=True)
    by_domains = select_best(build_tree(nodes, 4, levels=with_nvlink), 7, objective_for(None, 4), with_nvlink)
    assert len({n.nvlink_domain for n, _ in by_domains.takes}) == 2 and by_domains.counts[1] == 2


def test_required_nvlink_level_keeps_the_gang_in_one_domain():
    nodes = sorted(profile_nodes(spines=1, leaves=1, tors=2, nodes=4, gpus=4),
                   key=lambda n: (n["metadata"]["labels"][LABEL_TOR], n["metadata"]["name"]))
    for i, node in enumerate(nodes):
        # Racks of 4 nodes, the middle one across both TORs: 3 nodes, 1 + 3 (counted per TOR), 1.
        node["metadata"]["labels"][LABEL_GPU_CLIQUE] = f"rack{(i + 1) // 4}"
    levels = f"spine={LABEL_SPINE},leaf={LABEL_LEAF},tor={LABEL_TOR},nvlink"
    snap = build_snapshot(nodes, (), scheme_for("native", levels))
    decision = solve(snap, GangRequest("j", 3, 4, required_tier="nvlink", rail_alignment=RailAlignment.NONE))
    assert decision.placement is not None
    assert len({snap.node(r.node).nvlink_domain for r in decision.placement.replicas}) == 1
    assert dict(decision.placement.domains)["nvlink"] == 1
    too_big = solve(snap, GangRequest("j", 4, 4, required_tier="nvlink"))
    assert not too_big.placed and "requiredTier nvlink" in too_big.reason
