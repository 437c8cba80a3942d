"""Label schemes: how a node's labels map onto Railyard's topology model.

The native scheme is `topology.railyard.dev/*`. Presets translate other conventions (NVIDIA
topograph, AWS, GKE, GPU Feature Discovery) onto the same model; several can be combined, later
ones filling fields the earlier ones leave unset (e.g. `aws,gfd`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property

from railyard.topology.cluster.levels import DEFAULT_NAMES, NVLINK, LevelError, Levels, check_name

PREFIX = "topology.railyard.dev/"
LABEL_SPINE = PREFIX + "spine"
LABEL_LEAF = PREFIX + "leaf"
LABEL_TOR = PREFIX + "tor"
LABEL_GPU_RAIL = PREFIX + "gpu-rail"
LABEL_GPU_NUMA = PREFIX + "gpu-numa"
LABEL_GPU_NVLINK = PREFIX + "gpu-nvlink"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_CLIQUE = "nvidia.com/gpu.clique"

GPU_RESOURCE = "nvidia.com/gpu"
ANNOTATION_GPUS = "railyard.dev/gpus"
SCHEDULING_GATE = "railyard.dev/gang"  # on every pod Railyard places until its gang is released
# The labels every replica pod carries, which inter-pod rules (anti-affinity, spread) match against.
LABEL_JOB = "railyard.dev/job-name"
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins / Kubeflow Trainer convention
# Railyard's quarantine (NoSchedule, value = the loss reason): no job is placed on such a node, whatever
# its tolerations; the operator lifts it at railyard.dev/quarantined-until.
QUARANTINE_TAINT = "railyard.dev/unhealthy"
ANNOTATION_QUARANTINED_UNTIL = "railyard.dev/quarantined-until"
ANNOTATION_QUARANTINED_AT = "railyard.dev/quarantined-at"  # when it began: the hourly straggler cap reads it
# Planned maintenance ahead of time (an admin, or a tool that knows of a host's maintenance window): the
# value says why. Running gangs save a step and move off the node; no new rank lands on it.
ANNOTATION_MAINTENANCE = "railyard.dev/maintenance"
# NVIDIA NVSentinel's node state label: a node it is draining is maintenance too (its drain evicts through
# the eviction API as well, which Railyard also sees).
LABEL_NVSENTINEL_STATE = "dgxc.nvidia.com/nvsentinel-state"
NVSENTINEL_DRAINING = ("draining",)
# Kubernetes' non-graceful node shutdown taint: no kubelet will answer for the node's pods.
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


@dataclass(frozen=True)
class LabelScheme:
    """Which label keys hold each topology field. `None` means the convention has no such label.

    A missing network tier collapses into its parent (a cluster with no spine label is one spine).
    `qualify` prefixes domain ids with their parents' ids, for conventions whose ids are only
    unique within the parent.
    """

    name: str
    spine: str | None = None
    leaf: str | None = None
    tor: str | None = None
    gpu_rail: str | None = None
    gpu_numa: str | None = None
    gpu_nvlink: str | None = None
    gpu_count: str | None = None
    nvlink_domain: str | None = None
    qualify: bool = False
    # A topology definition (parse_levels) adds levels above the spine, (name, label key) top to
    # bottom, names the three network roles, and may count NVLink domains as a level.
    upper: tuple[tuple[str, str], ...] = ()
    names: tuple[str, str, str] = DEFAULT_NAMES
    nvlink_level: bool = False

    def tier_of_label(self) -> dict[str, str]:
        """Node label key -> the level it labels (how Kueue TAS's topology annotations, which name label keys,
        read as Railyard's tiers); `kubernetes.io/hostname` is the node."""
        out = {"kubernetes.io/hostname": "node"}
        for name, key in (*self.upper, *zip(self.names, (self.spine, self.leaf, self.tor), strict=True)):
            if key:
                out[key] = name
        return out

    def merged_with(self, other: LabelScheme) -> LabelScheme:
        """This scheme with every unset field taken from `other`."""
        updates = {
            f.name: getattr(other, f.name)
            for f in fields(self)
            if f.name not in ("name", "qualify") and getattr(self, f.name) is None
        }
        return replace(self, name=f"{self.name},{other.name}", qualify=self.qualify or other.qualify,
                       **updates)

    @property
    def network_keys(self) -> tuple[tuple[str, str | None], ...]:
        """(level name, label key) of every network level, top to bottom."""
        spine, leaf, tor = self.names
        return (*self.upper, (spine, self.spine), (leaf, self.leaf), (tor, self.tor))

    @cached_property
    def levels(self) -> Levels:
        return Levels(tuple(name for name, _ in self.network_keys), self.nvlink_level)


NATIVE = LabelScheme(
    name="native", spine=LABEL_SPINE, leaf=LABEL_LEAF, tor=LABEL_TOR,
    gpu_rail=LABEL_GPU_RAIL, gpu_numa=LABEL_GPU_NUMA, gpu_nvlink=LABEL_GPU_NVLINK,
    nvlink_domain=LABEL_GPU_CLIQUE,  # multi-node NVLink domains (GB200 NVL72), as GPU Feature Discovery labels them
)
# NVIDIA topograph, current labels: tier-1 is the switch layer nearest the node's NICs.
TOPOGRAPH = LabelScheme(
    name="topograph", spine="fabric.topograph.run/tier-3", leaf="fabric.topograph.run/tier-2",
    tor="fabric.topograph.run/tier-1", nvlink_domain="accelerator.topograph.run/domain",
)
# topograph's older generations: {accelerator,block,spine,datacenter} and {accelerator,leaf,spine,core}.
TOPOGRAPH_V1 = LabelScheme(
    name="topograph-v1", spine="network.topology.nvidia.com/datacenter",
    leaf="network.topology.nvidia.com/spine", tor="network.topology.nvidia.com/block",
    nvlink_domain="network.topology.nvidia.com/accelerator",
)
TOPOGRAPH_V2 = LabelScheme(
    name="topograph-v2", spine="network.topology.nvidia.com/core",
    leaf="network.topology.nvidia.com/spine", tor="network.topology.nvidia.com/leaf",
    nvlink_domain="network.topology.nvidia.com/accelerator",
)
# AWS: layer-1 is the TOP of the network, layer-3 the one nearest the instance.
AWS = LabelScheme(
    name="aws", spine="topology.k8s.aws/network-node-layer-1",
    leaf="topology.k8s.aws/network-node-layer-2", tor="topology.k8s.aws/network-node-layer-3",
)
# GKE: a block holds sub-blocks; sub-block ids are only unique inside their block.
GKE = LabelScheme(
    name="gke", leaf="cloud.google.com/gce-topology-block",
    tor="cloud.google.com/gce-topology-subblock", qualify=True,
)
# GPU Feature Discovery describes GPUs, not the network: combine it with a network scheme.
GFD = LabelScheme(name="gfd", gpu_count=LABEL_GPU_COUNT, nvlink_domain=LABEL_GPU_CLIQUE)

PRESETS: dict[str, LabelScheme] = {
    s.name: s for s in (NATIVE, TOPOGRAPH, TOPOGRAPH_V1, TOPOGRAPH_V2, AWS, GKE, GFD)
}


def parse_levels(definition: str, base: LabelScheme = NATIVE) -> LabelScheme:
    """A topology definition: `name=labelKey` per network level, top to bottom, optionally ending
    with `nvlink` (NVLink domains from the base scheme's clique label, or `nvlink=labelKey`) —
    e.g. `zone=example.com/zone,spine=example.com/spine,leaf=example.com/leaf,tor=example.com/tor`.
    The lowest three network levels are the spine, leaf and TOR roles; with fewer than three, the
    missing top ones collapse (one domain). GPU labels come from `base`. Raises LevelError."""
    entries = [e.strip() for e in definition.split(",") if e.strip()]
    if not entries:
        raise LevelError("topology levels: empty definition; expected name=labelKey,... top to bottom")
    nvlink_key: str | None = None
    nvlink = False
    if entries[-1].split("=", 1)[0].strip() == NVLINK:
        nvlink = True
        last = entries.pop()
        nvlink_key = last.split("=", 1)[1].strip() if "=" in last else base.nvlink_domain or LABEL_GPU_CLIQUE
    pairs: list[tuple[str, str]] = []
    for entry in entries:
        name, sep, key = (part.strip() for part in entry.partition("="))
        if not sep or not key:
            raise LevelError(f"topology levels: {entry!r}: expected name=labelKey (and 'nvlink' only last)")
        pairs.append((check_name(name), key))
    if not pairs:
        raise LevelError("topology levels: at least one network level (name=labelKey) is needed")
    roles: list[tuple[str, str | None]] = [*pairs[-3:]]
    while len(roles) < 3:
        implied = DEFAULT_NAMES[3 - len(roles) - 1]
        if any(implied == name for name, _ in pairs):
            implied += "-implied"
        roles.insert(0, (implied, None))
    (spine_name, spine), (leaf_name, leaf), (tor_name, tor) = roles
    scheme = replace(base, name=f"{base.name}+levels", spine=spine, leaf=leaf, tor=tor,
                     upper=tuple(pairs[:-3]), names=(spine_name, leaf_name, tor_name), nvlink_level=nvlink,
                     nvlink_domain=nvlink_key or base.nvlink_domain)
    scheme.levels  # noqa: B018 - validates the names (unique, not 'node')
    return scheme


def resolve_scheme(spec: str | None) -> LabelScheme:
    """`"aws,gfd"` -> the AWS scheme with GFD filling its GPU fields. Raises ValueError naming the preset."""
    names = [n.strip() for n in (spec or "native").split(",") if n.strip()] or ["native"]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise ValueError(
            f"unknown label preset {unknown[0]!r}; known presets: {', '.join(sorted(PRESETS))}"
        )
    scheme = PRESETS[names[0]]
    for name in names[1:]:
        scheme = scheme.merged_with(PRESETS[name])
    return scheme


def scheme_for(presets: str | None, levels: str | None) -> LabelScheme:
    """The label preset(s), with the network levels of a topology definition (parse_levels) if given."""
    scheme = resolve_scheme(presets)
    return parse_levels(levels, scheme) if levels else scheme
