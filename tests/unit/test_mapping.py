"""Rank mapping as graph mapping: the traffic model, and the mapping against brute force and
against the depth-first / pipeline-chain order it replaces."""

from __future__ import annotations

import itertools
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.api.job import Parallelism
from railyard.topology.solver.commgraph import ModelHints, is_ring, replica_graph
from railyard.topology.solver.graph_mapping import _kl_pass, _kl_pass_in_python, map_ranks, mapping_cost
from railyard.topology.solver.rank_order import order_replicas

from tests.support.clusters import fabric_node


def _slots(rng: random.Random, replicas: int, gpus: int, per_node: int):
    nodes = [fabric_node(rng.randint(0, 1), rng.randint(0, 1), rng.randint(0, 1), i) for i in range(replicas)]
    return [(nodes[i // per_node], tuple(range((i % per_node) * gpus, (i % per_node + 1) * gpus)))
            for i in range(replicas)]


def test_pure_data_parallelism_is_a_ring_and_keeps_the_depth_first_order():
    assert is_ring(8, 8, None) and is_ring(8, 8, Parallelism(tensor=8))
    assert not is_ring(8, 8, Parallelism(tensor=16)) and not is_ring(8, 8, Parallelism(pipeline=2))
    slots = _slots(random.Random(1), 8, 8, 1)
    assert map_ranks(slots, 8, Parallelism(tensor=8)) == order_replicas(slots, 8, Parallelism(tensor=8))


def test_traffic_model_edges():
    hints = ModelHints(parameters=1_000_000_000, hidden_size=1000, sequence_length=1000, micro_batch_size=1,
                       layers=8, micro_batches=4)
    # 4 replicas x 8 GPUs, tensor 16 (two replicas a group), pipeline 2, data 1.
    edges = replica_graph(4, 8, Parallelism(tensor=16, pipeline=2), hints)
    activation = 1000 * 1000 * 2
    tensor_ring_edge = (8 / 2) * 4 * 4 * 2 * 15 / 16 * activation  # layers per stage x 4 all-reduces x micro x 2(T-1)/T
    assert edges[(0, 1)] == 2 * tensor_ring_edge  # the ring crosses between the two replicas twice
    assert edges[(0, 2)] == 8 * 4 * 2 * activation / 16  # stage 0 -> 1: 8 GPU pairs, fwd + bwd, split by T
    assert (0, 3) not in edges and (1, 2) not in edges
    # Data parallelism: gradients of the shard, 2(D-1)/D of them over each ring edge.
    edges = replica_graph(4, 8, Parallelism(tensor=8, pipeline=2), hints)
    assert edges[(0, 1)] == 8 * (2 * 1 / 2) * 1_000_000_000 / 16 * 2


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([4, 6, 8, 12, 16]), st.sampled_from([2, 4, 8]),
       st.sampled_from([(16, 1), (1, 2), (8, 2), (16, 2), (2, 4), (8, 4)]))
def test_mapping_is_a_permutation_never_costlier_than_the_order_it_replaces(seed, replicas, gpus, layout):
    tensor, pipeline = layout
    if (replicas * gpus) % (tensor * pipeline):
        return
    parallelism = Parallelism(tensor=tensor, pipeline=pipeline)
    slots = _slots(random.Random(seed), replicas, gpus, 2 if gpus <= 4 else 1)
    mapped = map_ranks(slots, gpus, parallelism)
    assert sorted(map(id, mapped)) == sorted(map(id, slots))
    edges = replica_graph(replicas, gpus, parallelism)
    assert mapping_cost(edges, mapped) <= mapping_cost(edges, order_replicas(slots, gpus, parallelism))


def test_mapping_is_near_the_brute_force_optimum_on_small_gangs():
    rng = random.Random(3)
    ratios = []
    while len(ratios) < 40:
        replicas, gpus = rng.choice([4, 6]), rng.choice([2, 4, 8])
        layouts = [(t, p) for t in (1, 2, 4, 8, 16) for p in (1, 2, 3)
                   if (replicas * gpus) % (t * p) == 0 and (p > 1 or t > gpus)]
        if not layouts:
            continue
        tensor, pipeline = rng.choice(layouts)
        parallelism = Parallelism(tensor=tensor, pipeline=pipeline)
        slots = _slots(rng, replicas, gpus, rng.choice([1, 2]) if gpus <= 4 else 1)
        edges = replica_graph(replicas, gpus, parallelism)
        best = min(mapping_cost(edges, [slots[i] for i in p]) for p in itertools.permutations(range(replicas)))
        ratios.append(mapping_cost(edges, map_ranks(slots, gpus, parallelism)) / best if best else 1.0)
    assert sum(ratios) / len(ratios) <= 1.02 and max(ratios) <= 1.25, ratios


def test_spec_model_reaches_the_request_with_defaults_for_what_it_leaves_out():
    from railyard.topology.api.job import TrainingJob
    from railyard.topology.solver.request import GangRequest

    from tests.support.jobs import make_job

    job = make_job("m", 4)
    job["spec"]["model"] = {"parameters": 70_000_000_000, "layers": 80}
    request = GangRequest.from_job(TrainingJob.model_validate(job))
    assert request.model == ModelHints(parameters=70_000_000_000, layers=80)
    assert GangRequest.from_job(TrainingJob.model_validate(make_job("n", 4))).model is None


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 40), st.sampled_from([0.0, 0.3, 0.7]))
def test_the_python_kl_pass_swaps_exactly_as_the_numpy_one(seed, n, sparsity):
    """Same swaps, same best prefix, bit for bit, ties included (small integer weights tie often)."""
    rng = np.random.default_rng(seed)
    weights = rng.integers(0, 4, (n, n)).astype(float) * (rng.random((n, n)) >= sparsity)
    weights = np.triu(weights, 1) + np.triu(weights, 1).T
    size = int(rng.integers(1, n))
    left, right = np.arange(size), np.arange(size, n)
    cross2 = 2 * weights[np.ix_(left, right)]
    left2, right2 = 2 * weights[np.ix_(left, left)], 2 * weights[np.ix_(right, right)]
    gain_left = (cross2.sum(axis=1) - left2.sum(axis=1)) / 2
    gain_right = (cross2.sum(axis=0) - right2.sum(axis=1)) / 2
    by_numpy = _kl_pass(gain_left.copy(), gain_right.copy(), cross2, left2, right2)
    by_python = _kl_pass_in_python(gain_left, gain_right, cross2, left2, right2)
    assert by_python == by_numpy
