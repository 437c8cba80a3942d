"""Whether a gang could ever fit the cluster (the rule that keeps such a job from reserving) is
answered per gang shape and remembered with the nodes: jobs of one shape share the answer, jobs that
differ in anything that decides it do not."""

from __future__ import annotations

from railyard.topology.solver.decision import never_fits
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import snapshot


def test_jobs_of_one_shape_share_the_answer_and_the_rest_get_their_own():
    snap = snapshot()  # 2 leaves x 2 TORs x 4 nodes x 8 GPUs, a node offers 128 cores
    snap = snap.allocate((n.name, range(8)) for n in snap.nodes[:12])  # busy now: never_fits ignores it
    assert never_fits(snap, GangRequest("a", 8, 8)) is None
    assert never_fits(snap, GangRequest("b", 8, 8, parallelism=None, preferred_tier="tor")) is None
    tor = never_fits(snap, GangRequest("c", 8, 8, required_tier="tor"))  # a TOR has 4 nodes
    assert tor is not None and "requiredTier tor" in tor.reason
    cpu = never_fits(snap, GangRequest("d", 8, 8, resources={"cpu": 1_000_000}))
    assert cpu is not None and "cpu" in cpu.reason
    too_many = never_fits(snap, GangRequest("e", 17, 8))
    assert too_many is not None and "job needs 17" in too_many.reason
    elastic = GangRequest("f", 17, 8, min_replicas=16)  # fits at its smallest
    assert never_fits(snap, elastic) is None
    assert never_fits(snap, GangRequest("g", 8, 8)) is None  # the first answer still holds
