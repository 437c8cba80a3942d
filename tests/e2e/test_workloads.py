"""Workloads Railyard places without owning them, on the real control plane with their real controllers (built
from the Go module proxy at the versions hack/versions.env pins, started only here: JobSet, LeaderWorkerSet,
Kubeflow Trainer v2, Kueue): each project's own example, adapted only by the opt-in label and a GPU request
(tests/e2e/upstream/), gated by Railyard's pod webhook as the chart registers it, placed by Railyard as one gang,
ranks mapped by the workload's indices, released together."""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from bench.controllers import apply_crds, webhook, workload_controller
from kubernetes import client
from railyard.operator.kube.client import KubeApi
from railyard.topology.cluster.labels import LABEL_TOR

from tests.e2e.test_operator import assert_no_gpu_double_booked
from tests.support.operator import OperatorProcess, free_port, wait_for_leader
from tests.support.poll import poll
from tests.support.rig import REPO, load_hack_module
from tests.support.tls import ca_bundle, certs, client_ca

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    not os.environ.get("RAILYARD_LOCAL_RIG"),
    reason="the workload controllers and Railyard's pod webhook run in this process: the API server must reach "
           "127.0.0.1 (the local rig)")]
UPSTREAM = Path(__file__).parent / "upstream"
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
LWS = ("leaderworkerset.x-k8s.io", "v1")


@contextlib.contextmanager
def _controller(directory: Path, name: str) -> Iterator[None]:
    with workload_controller(name, directory) as log:
        try:
            yield
        finally:
            print(log.read_text(errors="replace")[-3000:])


@pytest.fixture(scope="module")
def jobset_controller(api_client, tmp_path_factory) -> Iterator[None]:
    with _controller(tmp_path_factory.mktemp("jobset"), "jobset"):
        yield


@pytest.fixture(scope="module")
def lws_controller(api_client, tmp_path_factory) -> Iterator[None]:
    with _controller(tmp_path_factory.mktemp("lws"), "lws"):
        yield


TRAINER = ("trainer.kubeflow.org", "v1alpha1")
TRAINER_NAMESPACE, TRAINER_SERVICE = "kubeflow-system", "kubeflow-trainer-controller-manager"
TRAINER_CERTS = Path("/tmp/k8s-webhook-server/serving-certs")  # where Trainer reads its certificates (fixed)


def _host_address() -> str:
    """This host's first global IPv4 address: an endpoint the API server dials (loopback is refused there)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         check=True).stdout.split()
    found = [word.split("/")[0] for before, word in itertools.pairwise(out) if before == "inet"]
    if not found:
        pytest.fail("no global IPv4 address on this host for Kubeflow Trainer's webhook endpoint")
    return found[0]


@pytest.fixture(scope="module")
def trainer_controller(jobset_controller, api_client, tmp_path_factory) -> Iterator[Path]:
    """Kubeflow Trainer v2 (its TrainJobs run as JobSets) with its own certificate manager, as its manifests
    install it: an empty Secret it fills, its ValidatingWebhookConfiguration it injects its CA into, its Service,
    here without a selector, its endpoint this host (the rig's API server calls it there and checks the cert
    against the Service's DNS name). Yields the build directory (the runtime and manifests kept beside it)."""
    cluster = load_hack_module("cluster", "cluster.py")
    binary = cluster.binary("trainer")
    if not binary.exists():
        subprocess.run([str(REPO / "hack" / "build-binaries.sh"), "trainer"], check=True)
    apply_crds(binary.parent / "crds", KubeApi(workers=1, kubeconfig=str(cluster.KUBECONFIG)))
    core, admission = client.CoreV1Api(api_client), client.AdmissionregistrationV1Api(api_client)
    port, health = free_port(), free_port()
    shutil.rmtree(TRAINER_CERTS.parent, ignore_errors=True)  # another run's certificates
    with contextlib.suppress(client.ApiException):
        core.create_namespace({"metadata": {"name": TRAINER_NAMESPACE}})
    core.create_namespaced_secret(TRAINER_NAMESPACE, {"metadata": {"name": "kubeflow-trainer-webhook-cert"}})
    core.create_namespaced_service(TRAINER_NAMESPACE, {"metadata": {"name": TRAINER_SERVICE}, "spec": {
        "ports": [{"name": "webhook", "port": 443, "targetPort": port}]}})
    core.create_namespaced_endpoints(TRAINER_NAMESPACE, {"metadata": {"name": TRAINER_SERVICE}, "subsets": [{
        "addresses": [{"ip": _host_address()}], "ports": [{"name": "webhook", "port": port}]}]})
    hooks = yaml.safe_load((binary.parent / "manifests.yaml").read_text())
    hooks["metadata"]["name"] = "validator.trainer.kubeflow.org"  # as its kustomization names it
    for hook in hooks["webhooks"]:
        hook["clientConfig"]["service"].update(name=TRAINER_SERVICE, namespace=TRAINER_NAMESPACE, port=443)
    admission.create_validating_webhook_configuration(hooks)
    log = tmp_path_factory.mktemp("trainer") / "trainer.log"
    proc = subprocess.Popen([str(binary), f"--webhook-server-port={port}", "--metrics-bind-address=0",
                             f"--health-probe-bind-address=127.0.0.1:{health}", "--leader-elect=false"],
                            env={**os.environ, "KUBECONFIG": str(cluster.KUBECONFIG)},
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        made = poll(lambda: (core.read_namespaced_secret("kubeflow-trainer-webhook-cert", TRAINER_NAMESPACE).data
                             or {}).get("tls.key") and core.read_namespaced_secret(
                                 "kubeflow-trainer-webhook-cert", TRAINER_NAMESPACE).data, 60,
                    "Kubeflow Trainer's certificates in its Secret")
        TRAINER_CERTS.mkdir(parents=True, exist_ok=True)
        for key in ("ca.crt", "tls.crt", "tls.key"):  # as the kubelet mounts the Secret in its pod
            (TRAINER_CERTS / key).write_bytes(base64.b64decode(made[key]))
        poll(lambda: proc.poll() is None and cluster._http_ok(f"http://127.0.0.1:{health}/readyz"), 120,
             "Kubeflow Trainer ready (its certificates mounted and its CA injected)")
        yield binary.parent
    finally:
        with contextlib.suppress(client.ApiException):
            admission.delete_validating_webhook_configuration(hooks["metadata"]["name"])
        with contextlib.suppress(client.ApiException):
            client.CustomObjectsApi(api_client).delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes",
                                                                             "torch-distributed")
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(TRAINER_NAMESPACE)
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        shutil.rmtree(TRAINER_CERTS.parent, ignore_errors=True)
        print(log.read_text(errors="replace")[-3000:])


@pytest.fixture
def gang_operator(identity, crds, api_client, coordination, core, namespace, tmp_path) -> Iterator[OperatorProcess]:
    """An operator serving the pod webhook over TLS, registered as the chart registers it (opted-in pods of
    this test's namespace only)."""
    made = certs(tmp_path)
    lease, port = f"railyard-e2e-{uuid.uuid4().hex[:6]}", free_port()
    env = {"RAILYARD_REPORT_PORT": str(port), "RAILYARD_REPORT_TLS_CERT": str(made["crt"]),
           "RAILYARD_REPORT_TLS_KEY": str(made["key"]), **client_ca()}
    op = OperatorProcess(identity, lease, tmp_path, name="workloads", extra_env=env)
    op.env = env  # a test may start another on the same webhook
    admission = client.AdmissionregistrationV1Api(api_client)
    hook = f"railyard-e2e-gang-pods-{namespace}"
    admission.create_mutating_webhook_configuration({"metadata": {"name": hook}, "webhooks": [{
        **webhook("gang-pods.railyard.dev", f"https://127.0.0.1:{port}/v1/gang-pods", ca_bundle(made["ca"]),
                   "pods", ["CREATE"], selector={"matchLabels": {"railyard.dev/scheduling": "gang"}}),
        "reinvocationPolicy": "IfNeeded",
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]})
    try:
        wait_for_leader(coordination, lease)
        yield op
    finally:
        with contextlib.suppress(client.ApiException):
            admission.delete_mutating_webhook_configuration(hook)
        op.stop()
        print(op.log_tail(30))
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(lease)


def _gang(custom, namespace: str, kind: str) -> dict | None:
    jobs = custom.list_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs",
                                                label_selector=f"railyard.dev/adopted-kind={kind}")["items"]
    return jobs[0] if len(jobs) == 1 else None


def test_jobsets_own_example_is_placed_by_railyard_as_one_gang_ranked_by_its_indices(
        jobset_controller, gang_operator, api_client, core, custom, namespace):
    body = yaml.safe_load((UPSTREAM / "jobset-paralleljobs.yaml").read_text())
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(*JOBSET, namespace, "jobsets", body)

    def released() -> dict | None:
        gang = _gang(custom, namespace, "JobSet")
        placed = next((c for c in ((gang or {}).get("status") or {}).get("conditions") or []
                       if c["type"] == "Placed"), None)
        return gang if placed and placed["reason"] == "Released" else None

    gang = poll(released, 120, "the JobSet's gang placed and released by Railyard")
    assert gang["spec"]["replicas"] == 5 and gang["spec"]["adopt"]["name"] == "paralleljobs"
    assert gang["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(
        namespace, label_selector="jobset.sigs.k8s.io/jobset-name=paralleljobs").items}
    assert len(pods) == 5 and all(p.metadata.owner_references[0].kind == "Job" for p in pods.values()), \
        "every pod is the JobSet's Jobs' own"
    ranks = {r["rank"]: r for r in gang["status"]["placement"]["ranks"]}

    def bound() -> bool:
        fresh = {p.metadata.name: p for p in core.list_namespaced_pod(
            namespace, label_selector="jobset.sigs.k8s.io/jobset-name=paralleljobs").items}
        return all(fresh[r["pod"]].spec.node_name == r["node"] for r in ranks.values())

    poll(bound, 60, "every pod bound to the node Railyard chose")
    for rank, entry in ranks.items():
        pod = pods[entry["pod"]]
        labels = pod.metadata.labels
        expected = 4 * int(labels["jobset.sigs.k8s.io/job-global-index"]) + \
            int(labels["batch.kubernetes.io/job-completion-index"])
        assert rank == expected, f"{pod.metadata.name}: rank {rank}, its indices say {expected}"
        assert pod.metadata.annotations["railyard.dev/gpus"] == ",".join(map(str, entry["gpus"]))
    assert_no_gpu_double_booked(api_client, core)



def test_a_kubeflow_trainjob_on_an_opted_in_runtime_is_placed_as_one_gang_ranked_by_its_node_index(
        trainer_controller, gang_operator, api_client, core, custom, namespace):
    runtime = yaml.safe_load((trainer_controller / "torch_distributed.yaml").read_text())
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("labels", {})["railyard.dev/scheduling"] = "gang"  # the opt-in
    custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)  # Trainer's webhook admits it
    body = yaml.safe_load((UPSTREAM / "trainjob-pytorch.yaml").read_text())
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    gang = poll(lambda: (g := _gang(custom, namespace, "JobSet")) and _placed(g) and g, 180,
                "the TrainJob's JobSet placed and released by Railyard as one gang")
    assert gang["spec"]["replicas"] == 2 and gang["spec"]["adopt"]["name"] == "pytorch-mnist-example"
    jobset = custom.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", "pytorch-mnist-example")
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob", "the JobSet is the TrainJob's own"
    ranks = {r["rank"]: r for r in gang["status"]["placement"]["ranks"]}

    def bound() -> bool:
        return all(core.read_namespaced_pod(r["pod"], namespace).spec.node_name == r["node"] for r in ranks.values())

    poll(bound, 60, "every node's pod bound where Railyard chose")
    for rank, entry in ranks.items():
        pod = core.read_namespaced_pod(entry["pod"], namespace)
        assert int(pod.metadata.labels["batch.kubernetes.io/job-completion-index"]) == rank
        assert pod.metadata.uid == entry["podUid"]
    nodes = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
    assert len({nodes[r["node"]][LABEL_TOR] for r in ranks.values()}) == 1, "two nodes of one TOR"
    assert_no_gpu_double_booked(api_client, core)


INDEXED_JOB = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "indexed"},
    "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3, "backoffLimit": 3,
             "template": {"metadata": {"labels": {"railyard.dev/scheduling": "gang"}},
                          "spec": {"restartPolicy": "Never", "containers": [{
                              "name": "train", "image": "busybox", "command": ["sleep", "3600"],
                              "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}


def test_an_indexed_jobs_pod_made_again_is_placed_alone_next_to_the_survivors(gang_operator, api_client, core,
                                                                              custom, namespace):
    client.BatchV1Api(api_client).create_namespaced_job(namespace, INDEXED_JOB)

    def released(restarts: int) -> dict | None:
        gang = _gang(custom, namespace, "Job")
        status = (gang or {}).get("status") or {}
        placed = next((c for c in status.get("conditions") or [] if c["type"] == "Placed"), None)
        ok = placed and placed["reason"] == "Released" and status.get("restartCount", 0) == restarts
        return gang if ok else None

    gang = poll(lambda: released(0), 120, "the indexed Job's gang placed and released by Railyard")
    ranks = {r["rank"]: r for r in gang["status"]["placement"]["ranks"]}
    for rank, entry in ranks.items():
        pod = core.read_namespaced_pod(entry["pod"], namespace)
        assert int(pod.metadata.labels["batch.kubernetes.io/job-completion-index"]) == rank
    # A rank's pod is deleted (its process lost): the Job makes it again, gated; Railyard places only that pod,
    # next to the survivors, whose pods stay as they are.
    victim = ranks[1]
    core.delete_namespaced_pod(victim["pod"], namespace, grace_period_seconds=0)
    again = poll(lambda: released(1), 120, "the re-made pod placed by Railyard")
    after = {r["rank"]: r for r in again["status"]["placement"]["ranks"]}
    assert after[1]["pod"] != victim["pod"]
    assert {k: (v["pod"], v["podUid"], v["node"]) for k, v in after.items() if k != 1} == \
        {k: (v["pod"], v["podUid"], v["node"]) for k, v in ranks.items() if k != 1}, "the survivors untouched"
    nodes = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
    assert nodes[after[1]["node"]][LABEL_TOR] == nodes[victim["node"]][LABEL_TOR], "in the lost rank's TOR"
    poll(lambda: core.read_namespaced_pod(after[1]["pod"], namespace).spec.node_name == after[1]["node"], 60,
         "the re-made pod bound where Railyard chose")
    assert_no_gpu_double_booked(api_client, core)


def test_while_the_pod_webhook_is_down_no_opted_in_pod_is_created_and_once_it_is_back_the_gang_is_placed(
        gang_operator, identity, coordination, api_client, core, custom, namespace, tmp_path):
    """The webhook fails closed (docs/workloads.md): with the operator down, the Job's opted-in pods are refused at
    creation (none reaches the default scheduler ungated); its controller retries, and once an operator serves the
    webhook again they are created gated and placed as one gang."""
    gang_operator.stop()
    client.BatchV1Api(api_client).create_namespaced_job(namespace, INDEXED_JOB)

    def refused() -> list:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=indexed").items
        return [e for e in events if e.reason == "FailedCreate" and "gang-pods.railyard.dev" in (e.message or "")]

    poll(refused, 60, "the Job's pods refused by the webhook while no operator serves it")
    assert not core.list_namespaced_pod(namespace).items, "no opted-in pod escaped the gate"
    back = OperatorProcess(identity, gang_operator.lease_namespace, tmp_path, name="back",
                           extra_env=gang_operator.env)
    try:
        gang = poll(lambda: (g := _gang(custom, namespace, "Job")) and _placed(g) and g, 180,
                    "the Job's gang placed once the webhook is back")
        assert len(gang["status"]["placement"]["ranks"]) == 3
        assert_no_gpu_double_booked(api_client, core)
    finally:
        back.stop()


def _placed(gang: dict | None, restarts: int | None = 0) -> bool:
    """Placed and released, after exactly `restarts` restarts (None: any number)."""
    status = (gang or {}).get("status") or {}
    placed = next((c for c in status.get("conditions") or [] if c["type"] == "Placed"), None)
    return bool(placed and placed["reason"] == "Released"
                and (restarts is None or status.get("restartCount", 0) == restarts))


def test_leaderworkersets_own_example_is_placed_one_gang_per_group_ranked_by_worker_index(
        lws_controller, gang_operator, api_client, core, custom, namespace):
    body = yaml.safe_load((UPSTREAM / "lws-sample.yaml").read_text())
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(*LWS, namespace, "leaderworkersets", body)

    def gangs() -> list[dict] | None:
        found = custom.list_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs",
                                                     label_selector="railyard.dev/adopted-kind=LeaderWorkerSet")
        items = found["items"]
        return items if len(items) == 3 and all(_placed(g) for g in items) else None

    placed = poll(gangs, 180, "three LWS groups placed and released by Railyard, one gang each")
    for gang in placed:
        assert gang["spec"]["replicas"] == 4
        for entry in gang["status"]["placement"]["ranks"]:
            pod = core.read_namespaced_pod(entry["pod"], namespace)
            assert int(pod.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"]) == entry["rank"]
            assert pod.metadata.uid == entry["podUid"]
    poll(lambda: all(p.spec.node_name for p in core.list_namespaced_pod(namespace).items), 60, "every pod bound")
    assert_no_gpu_double_booked(api_client, core)
    # The group's leader pod is deleted: LWS re-creates the whole group (the workers' StatefulSet is the leader's),
    # so no rank survives; Railyard gives the placement back and places the group anew once its pods are back.
    # When the new leader appears before LWS has deleted the old workers, it is first placed next to them as a
    # replacement (one restart), then the whole group is given back as the workers go: either way it ends placed
    # anew, every rank a new pod.
    gang = placed[0]
    before = {r["podUid"] for r in gang["status"]["placement"]["ranks"]}
    leader = next(r["pod"] for r in gang["status"]["placement"]["ranks"] if r["rank"] == 0)
    core.delete_namespaced_pod(leader, namespace)

    def anew() -> dict | None:
        fresh = custom.get_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs",
                                                    gang["metadata"]["name"])
        ranks = ((fresh.get("status") or {}).get("placement") or {}).get("ranks") or []
        return fresh if _placed(fresh, None) and ranks and not before & {r["podUid"] for r in ranks} else None

    again = poll(anew, 180, "the re-created group placed anew as one gang")
    for entry in again["status"]["placement"]["ranks"]:
        pod = core.read_namespaced_pod(entry["pod"], namespace)
        assert pod.metadata.uid == entry["podUid"]
        assert int(pod.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"]) == entry["rank"]
    poll(lambda: all(p.spec.node_name for p in core.list_namespaced_pod(namespace).items), 60, "every pod bound")
    assert_no_gpu_double_booked(api_client, core)


@pytest.fixture
def kueue_admits(jobset_controller, api_client, namespace) -> Iterator[int]:
    """Kueue (built like the rest, TAS off) admitting JobSets of this namespace by quota: 40 GPUs."""
    from bench.peers import kueue as peers_kueue
    from railyard.operator.kube.client import KubeApi

    cluster = load_hack_module("cluster", "cluster.py")
    if not cluster.binary("kueue").exists():
        subprocess.run([str(REPO / "hack" / "build-binaries.sh"), "kueue"], check=True)
    api = KubeApi(kubeconfig=str(cluster.KUBECONFIG))
    quota = 40
    proc = peers_kueue.start(api, namespace, quota, frameworks=("jobset.x-k8s.io/jobset",), topology=False)
    custom = client.CustomObjectsApi(api_client)
    try:
        yield quota
    finally:
        # Kueue's Workloads carry its finalizer: they go while Kueue runs, or the namespace never does.
        custom.delete_collection_namespaced_custom_object(*JOBSET, namespace, "jobsets")
        with contextlib.suppress(Exception):
            poll(lambda: not custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace,
                                                                  "workloads")["items"], 60, "Kueue's Workloads gone")
        for workload in custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace,
                                                             "workloads")["items"]:
            with contextlib.suppress(client.ApiException):
                custom.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads",
                                                      workload["metadata"]["name"], {"metadata": {"finalizers": []}})
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        for plural, name in (("clusterqueues", "gpus"), ("resourceflavors", "gpu")):
            with contextlib.suppress(client.ApiException):
                custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural, name)


def _queued_jobset(name: str, pods: int) -> dict:
    """JobSet's example shape, queued to Kueue (created suspended, as Kueue's webhook would make it)."""
    body = yaml.safe_load((UPSTREAM / "jobset-paralleljobs.yaml").read_text())
    body["metadata"] = {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "train"}}
    body["spec"]["suspend"] = True
    body["spec"]["replicatedJobs"] = body["spec"]["replicatedJobs"][:1]
    job = body["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["parallelism"] = job["completions"] = pods
    return body


def test_kueue_admits_by_quota_and_railyard_places_what_it_admitted(kueue_admits, gang_operator, api_client, core,
                                                                    custom, namespace):
    jobsets = client.CustomObjectsApi(api_client)
    jobsets.create_namespaced_custom_object(*JOBSET, namespace, "jobsets", _queued_jobset("first", 4))
    jobsets.create_namespaced_custom_object(*JOBSET, namespace, "jobsets", _queued_jobset("second", 2))

    def placed(name: str) -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
        return bool(pods) and all(p.spec.node_name and not p.spec.scheduling_gates for p in pods)

    poll(lambda: placed("first"), 120, "the admitted JobSet placed by Railyard")
    # 32 of 40 GPUs admitted: the second (16) waits for quota, so Kueue keeps it suspended: no pod, nothing placed.
    second = jobsets.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", "second")
    assert second["spec"].get("suspend") is True
    assert not core.list_namespaced_pod(namespace, label_selector="jobset.sigs.k8s.io/jobset-name=second").items
    gang = _gang(custom, namespace, "JobSet")
    assert gang is not None and gang["spec"]["adopt"]["name"] == "first", "only what Kueue admitted is a gang"
    jobsets.delete_namespaced_custom_object(*JOBSET, namespace, "jobsets", "first",
                                            body={"propagationPolicy": "Foreground"})
    poll(lambda: placed("second"), 180, "once quota frees, Kueue admits the second and Railyard places it")
    assert_no_gpu_double_booked(api_client, core)
