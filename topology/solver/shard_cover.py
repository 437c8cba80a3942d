"""Save on fault, decided from the layout: when some replicas of a gang are lost without warning, do the survivors
still hold every model shard, and which of them save which shard (once each)?

A shard is one (tensor, pipeline) coordinate of the job's layout (commgraph.Layout: GPU global rank
g = t + T * (d + D * p), replica k holding GPUs k*G .. k*G+G-1). Its data-parallel replicas d = 0..D-1 hold the same
weights and, when the optimizer state is replicated across data parallelism (DDP, ZeRO stage 0 — what the job
declares with `checkpoint.saveOnFault`), the same optimizer state at the end of each step (Gupta et al., Just-In-Time
Checkpointing, EuroSys 2024). A shard survives when one of its GPUs is on a surviving replica; the lowest such
data-parallel index saves it. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from railyard.topology.solver.commgraph import Layout


@dataclass(frozen=True)
class ShardCover:
    """Who saves what: `savers` maps a surviving replica to the local ranks (GPU index within the replica) that
    save a shard, each shard exactly once; `lost_shards` are the (tensor, pipeline) coordinates no survivor
    holds (non-empty: save on fault cannot keep the step)."""

    savers: dict[int, tuple[int, ...]] = field(default_factory=dict)
    lost_shards: tuple[tuple[int, int], ...] = ()

    @property
    def covered(self) -> bool:
        return not self.lost_shards and bool(self.savers)

    def shard_of(self, replica: int, local_rank: int, layout: Layout) -> tuple[int, int]:
        """The (tensor, pipeline) shard a saver's local rank saves."""
        g = replica * layout.gpus_per_replica + local_rank
        t, rest = g % layout.tensor, g // layout.tensor
        return t, rest // layout.data


def cover(layout: Layout, replicas: int, lost: frozenset[int]) -> ShardCover:
    """The savers among the replicas not in `lost` (replica ranks 0..replicas-1), one per shard."""
    per_replica: dict[int, list[int]] = {}
    missing: list[tuple[int, int]] = []
    for p in range(layout.pipeline):
        for t in range(layout.tensor):
            for d in range(layout.data):
                g = layout.gpu(t, d, p)
                replica = g // layout.gpus_per_replica
                if replica < replicas and replica not in lost:
                    per_replica.setdefault(replica, []).append(g % layout.gpus_per_replica)
                    break
            else:
                missing.append((t, p))
    return ShardCover({r: tuple(sorted(ranks)) for r, ranks in sorted(per_replica.items())}, tuple(missing))
