"""The parts of a TrainingJob's pod template Railyard reads, typed: a malformed template is refused
with the field and value named (`template_problem`), never a crash deep in the solver, and what
Railyard itself owns in the pod is not the template's to set.

Typed (everything else in the template passes through untouched): metadata.labels/annotations,
spec.nodeSelector, affinity (node, pod, pod anti-affinity), tolerations, topologySpreadConstraints,
containers[].name/resources, initContainers[].name/resources, overhead, and the fields Railyard
decides: restartPolicy (Never: a rank that exits is the gang's business, not the kubelet's),
schedulingGates (Railyard gates the gang itself), schedulerName (kube-scheduler binds what Railyard
pinned) and priorityClassName/priority (the pods get the job's spec.priorityClassName). The CRD
schema checks the same fields where OpenAPI can (crds/)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from railyard.topology.api.quantity import parse_milli

MAX_ITEMS = 256  # a list of the template a pod could carry (the API server's own limits are larger)


class _Open(BaseModel):
    """A Kubernetes object part: the fields Railyard reads are typed, the rest are kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


def _quantity(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    parse_milli(value)  # raises naming the value
    return value


Quantity = Annotated[int | float | str, AfterValidator(_quantity)]
ResourceName = Annotated[str, Field(min_length=1, max_length=253)]
Labels = dict[str, str]


class Resources(_Open):
    limits: dict[ResourceName, Quantity] = {}
    requests: dict[ResourceName, Quantity] = {}


class Container(_Open):
    name: str = Field(min_length=1, max_length=253)
    resources: Resources | None = None


class NodeSelectorRequirement(_Open):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)


class NodeSelectorTerm(_Open):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list, alias="matchExpressions")
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list, alias="matchFields")


class NodeSelector(_Open):
    node_selector_terms: list[NodeSelectorTerm] = Field(alias="nodeSelectorTerms", max_length=MAX_ITEMS)


class PreferredSchedulingTerm(_Open):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(_Open):
    required: NodeSelector | None = Field(None, alias="requiredDuringSchedulingIgnoredDuringExecution")
    preferred: list[PreferredSchedulingTerm] = Field(default_factory=list,
                                                     alias="preferredDuringSchedulingIgnoredDuringExecution")


class LabelSelectorRequirement(_Open):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)


class LabelSelector(_Open):
    match_labels: Labels = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, alias="matchExpressions")


class PodAffinityTerm(_Open):
    label_selector: LabelSelector | None = Field(None, alias="labelSelector")
    namespace_selector: LabelSelector | None = Field(None, alias="namespaceSelector")
    namespaces: list[str] = []
    topology_key: str = Field(alias="topologyKey", min_length=1)


class WeightedPodAffinityTerm(_Open):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm = Field(alias="podAffinityTerm")


class PodAffinity(_Open):
    required: list[PodAffinityTerm] = Field(
        default_factory=list, alias="requiredDuringSchedulingIgnoredDuringExecution", max_length=MAX_ITEMS)
    preferred: list[WeightedPodAffinityTerm] = Field(default_factory=list,
                                                     alias="preferredDuringSchedulingIgnoredDuringExecution")


class Affinity(_Open):
    node_affinity: NodeAffinity | None = Field(None, alias="nodeAffinity")
    pod_affinity: PodAffinity | None = Field(None, alias="podAffinity")
    pod_anti_affinity: PodAffinity | None = Field(None, alias="podAntiAffinity")


class Toleration(_Open):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: int | None = Field(None, alias="tolerationSeconds")


class TopologySpreadConstraint(_Open):
    max_skew: int = Field(alias="maxSkew", ge=1)
    topology_key: str = Field(alias="topologyKey", min_length=1)
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(alias="whenUnsatisfiable")
    label_selector: LabelSelector | None = Field(None, alias="labelSelector")
    min_domains: int | None = Field(None, alias="minDomains", ge=1)


class PodSpec(_Open):
    containers: list[Container] = Field(min_length=1, max_length=64)
    init_containers: list[Container] = Field(default_factory=list, alias="initContainers", max_length=64)
    node_selector: Labels = Field(default_factory=dict, alias="nodeSelector")
    affinity: Affinity | None = None
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_ITEMS)
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(
        default_factory=list, alias="topologySpreadConstraints", max_length=MAX_ITEMS)
    overhead: dict[ResourceName, Quantity] = {}
    priority_class_name: None = Field(None, alias="priorityClassName")
    priority: None = None
    restart_policy: Literal["Never"] | None = Field(None, alias="restartPolicy")
    scheduling_gates: list[Any] = Field(default_factory=list, alias="schedulingGates", max_length=0)
    scheduler_name: Literal["default-scheduler"] | None = Field(None, alias="schedulerName")


class TemplateMeta(_Open):
    labels: Labels = {}
    annotations: Labels = {}


class PodTemplate(_Open):
    metadata: TemplateMeta | None = None
    spec: PodSpec


def shown_value(value: Any) -> str:
    """` (got VALUE)` for a value short enough to quote in an error."""
    text = repr(value)
    return f" (got {text})" if len(text) <= 80 else ""


_OWNED = {
    "restartPolicy": "must be Never (or unset): a rank that exits is handled by Railyard's fault policy, "
                     "which restarts the whole gang",
    "schedulingGates": "must be empty: Railyard gates the gang itself and releases it when every pod exists",
    "priorityClassName": "must be unset: set spec.priorityClassName, the job's class, which Railyard gives its "
                         "pods",
    "priority": "must be unset: the pods' priority comes from spec.priorityClassName",
    "schedulerName": "must be default-scheduler (or unset): kube-scheduler binds the pods Railyard pinned",
}


def template_problem(template: Any) -> str | None:
    """What is wrong with the template, naming the field (`spec.template.…`) and the value; None if
    every field Railyard reads is well-formed."""
    try:
        PodTemplate.model_validate(template)
    except ValidationError as e:
        parts = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            value = err.get("input")
            field = str(err["loc"][-1]) if err["loc"] else ""
            owned = next((why for key, why in _OWNED.items() if f"spec.{key}" in loc), None)
            message = owned or err["msg"].removeprefix("Value error, ")
            if field in _OWNED and not isinstance(value, dict | list):
                parts.append(f"spec.template.{loc}={value!r}: {message}")
                continue
            shown = "" if isinstance(value, dict) or owned else shown_value(value)
            parts.append(f"spec.template.{loc}: {message}{shown}")
        return "; ".join(dict.fromkeys(parts))
    return None
