"""Reading Kubernetes-style YAML: multi-document files and `v1 List`s, with errors that name the
file, the object and the field."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml
from pydantic import ValidationError
from railyard.topology.api.job import TrainingJob
from railyard.topology.api.template import shown_value
from railyard.topology.cluster.levels import DEFAULT_LEVELS, LevelError, Levels


class InputError(ValueError):
    """Invalid input; the message names the file, the object and the field."""


# libyaml's loader when PyYAML was built with it (several times faster than the pure-Python one).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _documents(text: str) -> list[Any]:
    """`kubectl get -o json` output is parsed as JSON (a 12,288-node dump: 0.1 s instead of 10-40 s
    of YAML parsing); anything else as a YAML stream."""
    if text.lstrip().startswith("{"):
        try:
            return [json.loads(text)]
        except ValueError:
            pass  # not JSON after all (YAML flow style): the YAML parser says what is wrong
    return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]


def load_objects(text: str, source: str) -> list[dict[str, Any]]:
    """Every object in a YAML or JSON stream, with `kind: List` (and `*List`) expanded into its items."""
    try:
        documents = _documents(text)
    except yaml.YAMLError as e:
        raise InputError(f"{source}: not valid YAML: {e}") from None
    objects: list[dict[str, Any]] = []
    for index, doc in enumerate(documents, 1):
        if not isinstance(doc, dict):
            raise InputError(f"{source}: document {index}: expected a mapping (a Kubernetes object), "
                             f"got {type(doc).__name__}")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            for item_index, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise InputError(f"{source}: document {index}: items[{item_index}]: expected a mapping")
                objects.append(item)
        else:
            objects.append(doc)
    return objects


def describe(obj: dict[str, Any], index: int) -> str:
    raw = obj.get("metadata")
    meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    name = meta.get("name", "<unnamed>")
    namespace = meta.get("namespace")
    kind = obj.get("kind", "object")
    return f"{kind} {namespace + '/' if namespace else ''}{name} (object {index})"


def format_validation(error: ValidationError) -> str:
    parts = []
    for err in error.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if loc and msg.startswith(f"{loc}."):  # a validator that names the field itself
            parts.append(msg)
            continue
        value = err.get("input")
        shown = "" if isinstance(value, dict) or err["type"].startswith("value_error") else shown_value(value)
        parts.append(f"{loc}: {msg}{shown}" if loc else msg)
    return "; ".join(parts)


def require_kind(objects: Iterable[dict[str, Any]], kinds: tuple[str, ...], source: str) -> list[dict[str, Any]]:
    out = []
    for index, obj in enumerate(objects, 1):
        if obj.get("kind") not in kinds:
            raise InputError(f"{source}: {describe(obj, index)}: kind is {obj.get('kind')!r}, "
                             f"expected {' or '.join(kinds)}")
        if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
            raise InputError(f"{source}: {describe(obj, index)}: metadata.name is missing")
        out.append(obj)
    return out


def parse_jobs(objects: Iterable[dict[str, Any]], source: str, levels: Levels = DEFAULT_LEVELS) -> list[TrainingJob]:
    """TrainingJobs, each valid and naming only tiers that `levels` has; InputError otherwise."""
    jobs = []
    for index, obj in enumerate(require_kind(objects, ("TrainingJob",), source), 1):
        try:
            job = TrainingJob.model_validate(obj)
        except ValidationError as e:
            raise InputError(f"{source}: {describe(obj, index)}: {format_validation(e)}") from None
        try:
            levels.check_tiers(job.spec.topology.required_tier, job.spec.topology.preferred_tier)
        except LevelError as e:
            raise InputError(f"{source}: {describe(obj, index)}: {e}") from None
        if job.spec.gpus_per_replica < 0:
            raise InputError(f"{source}: {describe(obj, index)}: spec.template: negative nvidia.com/gpu")
        jobs.append(job)
    return jobs
