"""The typed status (railyard.topology.api.job.TrainingJobStatus) and the CRD's status schema name the same
fields, all the way down: what the operator writes is what the API server keeps (it prunes unknown
fields), and what it keeps the operator can read."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from railyard.topology.api.job import PACKED_FIELD, TrainingJobStatus

REPO = Path(__file__).resolve().parents[2]


def _crd_status() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "railyard.dev_trainingjobs.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (X, X | None, list[X], Annotated[...])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    if isinstance(annotation, types.UnionType):
        return None
    return None


def _differences(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[str]:
    if schema.get("type") == "array":
        schema = schema.get("items") or {}
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != PACKED_FIELD}
    fields = {(f.serialization_alias or f.alias or name): f for name, f in model.model_fields.items()}
    out = [f"{path}.{k}: in the model, not in the CRD" for k in sorted(set(fields) - set(properties))]
    out += [f"{path}.{k}: in the CRD, not in the model" for k in sorted(set(properties) - set(fields))]
    for key in sorted(set(fields) & set(properties)):
        inner = _model_of(fields[key].annotation)
        if inner is not None:
            out += _differences(inner, properties[key], f"{path}.{key}")
        elif properties[key].get("properties") or (properties[key].get("items") or {}).get("properties"):
            out.append(f"{path}.{key}: an object in the CRD, not a model")
    return out


def test_the_status_model_and_the_crd_status_schema_name_the_same_fields():
    assert _differences(TrainingJobStatus, _crd_status(), "status") == []


def test_a_partial_status_is_exactly_its_merge_patch():
    from railyard.topology.api.job import RestartRecord

    patch = TrainingJobStatus(placement=None, replicas=0, last_restart=RestartRecord(resume_step=7))
    assert patch.as_patch() == {"placement": None, "replicas": 0, "lastRestart": {"resumeStep": 7}}


def test_a_status_written_before_the_rename_is_still_read():
    old = TrainingJobStatus.model_validate({"lastCheckpoint": {"step": 3, "generation": 2}})
    assert old.last_checkpoint is not None and old.last_checkpoint.restart_count == 2
    assert old.as_patch()["lastCheckpoint"] == {"step": 3, "restartCount": 2}
