"""The renderers behind `railyard jobs`, `topology` and `explain` (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from railyard.operator.app.display import (
    explanation,
    job_rows,
    render_explanation,
    render_jobs,
    render_topology,
    topology,
)

from tests.support.clusters import snapshot

JOB = {"metadata": {"namespace": "ml", "name": "llm", "creationTimestamp": "2026-01-01T00:00:00Z"},
       "spec": {"replicas": 2},
       "status": {"replicas": 2, "placement": {"tors": 1, "railAligned": True},
                  "conditions": [{"type": "Placed", "status": "True", "reason": "Released", "message": "2 on 1 TOR"}]}}


def test_jobs_rows_and_table():
    rows = job_rows([JOB], now=datetime(2026, 1, 1, 2, 0, tzinfo=UTC))
    assert rows[0] | {"message": ""} == {"namespace": "ml", "name": "llm", "state": "Placed", "placement": "Released",
                                         "replicas": 2, "wanted": 2, "tors": 1, "railAligned": True, "age": "2h",
                                         "message": ""}
    text = render_jobs(rows)
    assert text.splitlines()[0].split()[:3] == ["NAMESPACE", "NAME", "STATE"] and "2/2" in text
    assert render_jobs([]) == "no TrainingJobs"


def test_topology_marks_each_gpu_by_its_job_in_rail_order_with_colour_only_when_asked():
    snap = snapshot(leaves=1, tors=1, nodes=2)
    node = snap.nodes[0].name
    pods = [{"metadata": {"namespace": "ml", "name": "llm-0", "labels": {"railyard.dev/job-name": "llm"},
                          "annotations": {"railyard.dev/gpus": "0,1"}},
             "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 2}}}]},
             "status": {"phase": "Running"}},
            {"metadata": {"namespace": "x", "name": "other"},
             "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
             "status": {"phase": "Running"}}]
    snap = snap.allocate([(node, [0, 1, 2])])
    view = topology(snap, pods)
    gpus = view["tors"][0]["nodes"][0]["gpus"]
    assert [g["job"] for g in gpus][:3] == ["ml/llm", "ml/llm", "other"] and gpus[3]["job"] is None
    plain = render_topology(view)
    assert f"{node} AAo....." in plain and "legend: A=ml/llm" in plain and "\033[" not in plain
    assert "\033[31mA\033[0m" in render_topology(view, colour=True)


def test_explanation_groups_excluded_nodes_by_reason():
    info = explanation(JOB, "requiredTier tor: largest TOR has 1 free whole nodes, job needs 2", False,
                       {"n1": "not Ready", "n2": "nodeSelector", "n3": "nodeSelector"},
                       [{"type": "Warning", "reason": "Unschedulable", "message": "m", "count": 3}])
    assert list(info["excludedNodes"]) == ["nodeSelector", "not Ready"]
    assert info["excludedNodes"]["nodeSelector"] == {"count": 2, "examples": ["n2", "n3"]}
    text = render_explanation(info)
    assert "Why it waits" in text and "requiredTier tor" in text and "2  nodeSelector" in text and "x3" in text


def test_per_job_series_follow_the_jobs_and_stay_bounded():
    from prometheus_client import REGISTRY
    from railyard.operator.base.metrics import JobFigures as F
    from railyard.operator.base.metrics import JobSeries

    def value(name, **labels):
        return REGISTRY.get_sample_value(name, labels)

    series = JobSeries(limit=2)
    series.update([F("ml", "a", "Queued", None, 0, 0), F("ml", "b", "Running", 2, 4, 1, 1000.0, 600, 1.5, 1),
                   F("ml", "c", "Placed", 1, 1, 0)])
    assert value("railyard_job_state", namespace="ml", trainingjob="a", state="Queued") == 1
    assert value("railyard_job_tors", namespace="ml", trainingjob="b") == 2
    assert value("railyard_job_state", namespace="ml", trainingjob="c", state="Placed") is None, "over the limit"
    assert value("railyard_job_restarts", namespace="ml", trainingjob="b") == 1
    assert value("railyard_job_last_checkpoint_timestamp_seconds", namespace="ml", trainingjob="b") == 1000
    assert value("railyard_job_last_checkpoint_timestamp_seconds", namespace="ml", trainingjob="a") is None
    assert value("railyard_job_step_seconds", namespace="ml", trainingjob="b") == 1.5
    assert value("railyard_job_stragglers", namespace="ml", trainingjob="b") == 1
    series.update([F("ml", "a", "Running", 3, 8, 0)])
    assert value("railyard_job_state", namespace="ml", trainingjob="a", state="Queued") is None
    assert value("railyard_job_state", namespace="ml", trainingjob="a", state="Running") == 1
    assert value("railyard_job_checkpoint_interval_seconds", namespace="ml", trainingjob="b") is None
    assert value("railyard_job_step_seconds", namespace="ml", trainingjob="b") is None
    assert value("railyard_job_replicas", namespace="ml", trainingjob="b") is None, "a deleted job's series go"
