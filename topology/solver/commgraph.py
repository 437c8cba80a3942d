"""The job's communication graph: who talks to whom, and how many bytes a training step moves.

GPU global ranks follow Megatron-LM's order — tensor fastest, then data, then pipeline:
g = t + T * (d + D * p). Replica k holds GPUs k*G .. k*G+G-1 (G GPUs per replica). Per step:

- tensor parallel (group: same d, p): every layer of the stage does 2 all-reduces forward and 2
  backward of one micro-batch's activations (b * s * h values); a ring all-reduce moves
  2(T-1)/T of that over each ring edge. Edges only matter when a group spans replicas (T > G).
- pipeline (same t, d; stage p to p+1): each micro-batch sends its activations forward and their
  gradients back: 2 * b * s * h / T values per edge (Megatron's scatter-gather splits them by T).
- data parallel (same t, p; ring over d): the gradients of the GPU's shard, P / (T * PP) values,
  all-reduced once per step: 2(D-1)/D of that over each ring edge.

Values are 2 bytes (bf16). Replica-level edge weight = the sum over its GPU pairs. Only the ratios
matter to the mapping; `ModelHints` gives the sizes, with defaults of a 7B-parameter, 32-layer,
4k-hidden model at sequence 4,096, micro-batch 1, and 4 micro-batches per pipeline stage a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # api.py imports ModelHints from here
    from railyard.topology.api.job import Parallelism

BYTES_PER_VALUE = 2


@dataclass(frozen=True)
class ModelHints:
    parameters: int = 7_000_000_000
    hidden_size: int = 4096
    sequence_length: int = 4096
    micro_batch_size: int = 1
    layers: int = 32
    micro_batches: int | None = None  # per step; default 4 per pipeline stage

    def steps_micro_batches(self, pipeline: int) -> int:
        return self.micro_batches if self.micro_batches is not None else 4 * pipeline


@dataclass(frozen=True)
class Layout:
    tensor: int
    pipeline: int
    data: int
    gpus_per_replica: int

    @classmethod
    def of(cls, replicas: int, gpus_per_replica: int, parallelism: Parallelism | None) -> Layout | None:
        """None when the layout is not a whole number of groups over the world."""
        world = replicas * gpus_per_replica
        tensor = parallelism.tensor if parallelism else 1
        pipeline = parallelism.pipeline if parallelism else 1
        if gpus_per_replica <= 0 or world % (tensor * pipeline):
            return None
        return cls(tensor, pipeline, world // (tensor * pipeline), gpus_per_replica)

    def gpu(self, t: int, d: int, p: int) -> int:
        return t + self.tensor * (d + self.data * p)


Edges = dict[tuple[int, int], float]


def replica_graph(replicas: int, gpus_per_replica: int, parallelism: Parallelism | None,
                  hints: ModelHints | None = None) -> Edges:
    """Bytes per step between replica pairs (a < b), or {} when the layout does not divide."""
    weights = replica_weights(replicas, gpus_per_replica, parallelism, hints)
    a, b = np.nonzero(np.triu(weights, 1))
    return {(int(x), int(y)): float(weights[x, y]) for x, y in zip(a, b, strict=True)}


def replica_weights(replicas: int, gpus_per_replica: int, parallelism: Parallelism | None,
                    hints: ModelHints | None = None) -> np.ndarray:
    """replica_graph as a symmetric replicas x replicas matrix (zeros when the layout does not
    divide), built with whole-array index arithmetic: 128 replicas of TP8 x PP4 x DP32 are 3,000
    GPU edges, a tenth of a solve in a Python loop."""
    out = np.zeros((replicas, replicas))
    layout = Layout.of(replicas, gpus_per_replica, parallelism)
    if layout is None:
        return out
    hints = hints or ModelHints()
    T, PP, D, G = layout.tensor, layout.pipeline, layout.data, layout.gpus_per_replica
    micro = hints.steps_micro_batches(PP)
    activation = hints.micro_batch_size * hints.sequence_length * hints.hidden_size * BYTES_PER_VALUE
    tensor_edge = (hints.layers / PP) * 4 * micro * 2 * (T - 1) / T * activation if T > 1 else 0.0
    pipeline_edge = micro * 2 * activation / T
    data_edge = 2 * (D - 1) / D * hints.parameters / (T * PP) * BYTES_PER_VALUE if D > 1 else 0.0
    p, d, t = (axis.ravel() for axis in np.meshgrid(np.arange(PP), np.arange(D), np.arange(T), indexing="ij"))
    gpu = t + T * (d + D * p)
    ends: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (GPU a, GPU b, bytes) per edge

    def edges(mask: np.ndarray, other: np.ndarray, weight: float | np.ndarray) -> None:
        ends.append((gpu[mask], other[mask], np.broadcast_to(weight, gpu.shape)[mask]))

    if T > 1:  # the tensor ring (T = 2: one edge)
        ring = np.where((T > 2) | (t == 0), tensor_edge, 0.0)
        edges(np.ones_like(t, dtype=bool), (t + 1) % T + T * (d + D * p), ring)
    edges(p + 1 < PP, t + T * (d + D * (p + 1)), pipeline_edge)
    edges(d < (D if D > 2 else D - 1), t + T * ((d + 1) % D + D * p), data_edge)  # the data ring (D = 2: one edge)
    a, b, w = (np.concatenate(parts) for parts in zip(*ends, strict=True))
    ra, rb = a // G, b // G
    cross = (ra != rb) & (w > 0)
    low, high = np.minimum(ra, rb)[cross], np.maximum(ra, rb)[cross]
    np.add.at(out, (low, high), w[cross])
    return out + out.T


def is_ring(replicas: int, gpus_per_replica: int, parallelism: Parallelism | None) -> bool:
    """Pure data parallelism at replica granularity (no pipeline, tensor groups inside a replica):
    every replica talks to the next one, so the topology DFS order is already an optimal ring."""
    layout = Layout.of(replicas, gpus_per_replica, parallelism)
    return layout is None or (layout.pipeline == 1 and layout.tensor <= gpus_per_replica
                              and gpus_per_replica % layout.tensor == 0)
