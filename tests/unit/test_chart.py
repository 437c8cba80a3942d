"""The Helm chart: lint --strict, what `helm template` renders, values validated by the schema, the
CRD template generated from crds/ without drift, the PrometheusRule equal to the plain rule file.
helm is built pinned by hack/build-binaries.sh (part of `make test`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.rig import load_hack_module, rig_binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "railyard"
KUBE_VERSION = "1.36.3"
IMAGE = "image.repository=registry.example/railyard"  # required: the chart names no registry of its own


sync = load_hack_module("sync_crds", "sync-crds.py")


@pytest.fixture(scope="module")
def helm() -> str:
    return str(rig_binary("helm"))


def render(helm: str, *sets: str) -> list[dict]:
    args = [helm, "template", "railyard", str(CHART), "-n", "railyard-system", "--kube-version", KUBE_VERSION]
    for s in (IMAGE, *sets):
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_lint_strict(helm):
    out = subprocess.run([helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "--set", IMAGE],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_chart_crd_is_generated_from_crds_without_drift():
    assert sync.drift() == [], "run hack/sync-crds.py"


def test_defaults_render_a_hardened_leader_elected_operator(helm):
    docs = render(helm)
    assert {d["kind"] for d in docs} == {"CustomResourceDefinition", "ServiceAccount", "ClusterRole",
                                         "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service",
                                         "Secret", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                                         "NetworkPolicy", "ValidatingWebhookConfiguration",
                                         "MutatingWebhookConfiguration"}
    crd = by_kind(docs, "CustomResourceDefinition")[0]
    source = yaml.safe_load((REPO / "crds" / "railyard.dev_trainingjobs.yaml").read_text())
    assert crd["spec"] == source["spec"]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    deploy = by_kind(docs, "Deployment")[0]
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["port"] == "health"
    env = {e["name"]: e for e in container["env"]}
    assert env["RAILYARD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert pod["serviceAccountName"] == by_kind(docs, "ServiceAccount")[0]["metadata"]["name"]
    assert by_kind(docs, "Service")[0]["metadata"]["name"] == "railyard"  # the alerts' job label
    reports = by_kind(docs, "Service")[1]
    assert env["RAILYARD_REPORT_URL"]["value"].startswith(f"https://{reports['metadata']['name']}.")
    assert reports["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}
    assert reports["spec"]["selector"]["railyard.dev/role"] == "leader", "only the leader takes reports"
    assert env["RAILYARD_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_reports_are_served_over_tls_with_a_generated_ca_by_default(helm):
    import base64
    import ssl
    import tempfile

    docs = render(helm)
    secret = by_kind(docs, "Secret")[0]
    pem = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(pem) == {"tls.crt", "tls.key", "ca.crt"}
    with tempfile.TemporaryDirectory() as d:  # the pair loads, and the CA verifies it (ssl does both)
        Path(d, "c").write_text(pem["tls.crt"])
        Path(d, "k").write_text(pem["tls.key"])
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(str(Path(d, "c")), str(Path(d, "k")))
        ssl.create_default_context(cadata=pem["ca.crt"])
    pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "reports-tls")
    assert env["RAILYARD_REPORT_CA_FILE"] == f"{mount['mountPath']}/ca.crt"
    assert next(v for v in pod["volumes"] if v["name"] == "reports-tls")["secret"]["secretName"] == \
        secret["metadata"]["name"]
    managed = render(helm, "reports.tls.certManager.enabled=true", "reports.tls.certManager.issuerRef.name=ca")
    assert not by_kind(managed, "Secret")
    cert = by_kind(managed, "Certificate")[0]
    assert cert["spec"]["secretName"] == secret["metadata"]["name"]
    assert "railyard-reports.railyard-system.svc" in cert["spec"]["dnsNames"]
    plain = render(helm, "reports.tls.enabled=false")
    assert not by_kind(plain, "Secret") and not by_kind(plain, "Certificate")
    assert not by_kind(plain, "ValidatingWebhookConfiguration"), "the API server calls webhooks over TLS only"


def test_the_eviction_webhook_reaches_the_leader_over_the_reports_tls_and_never_blocks(helm):
    docs = render(helm)
    hook = by_kind(docs, "ValidatingWebhookConfiguration")[0]["webhooks"][0]
    secret = by_kind(docs, "Secret")[0]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], "the CA that signed the serving cert"
    assert hook["clientConfig"]["service"] == {"name": "railyard-reports", "namespace": "railyard-system",
                                               "path": "/v1/evictions", "port": 8090}
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "NoneOnDryRun"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods/eviction"], "scope": "Namespaced"}]
    managed = render(helm, "reports.tls.certManager.enabled=true", "reports.tls.certManager.issuerRef.name=ca")
    injected = by_kind(managed, "ValidatingWebhookConfiguration")[0]
    assert injected["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"railyard-system/{by_kind(managed, 'Certificate')[0]['metadata']['name']}"
    env = {e["name"]: e.get("value") for e in by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert "RAILYARD_WEBHOOK_CLIENT_CA" not in env, "no client CA given: the NetworkPolicy keeps pods out"
    assert not [r for r in by_kind(docs, "ClusterRole")[0]["rules"] if "poddisruptionbudgets" in r["resources"]], \
        "no disruption budgets: a drain never stalls on an operator that is gone"
    authed = render(helm, "maintenance.evictionWebhook.clientCA.existingSecret=apiserver-webhook-client-ca")
    pod = by_kind(authed, "Deployment")[0]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["RAILYARD_WEBHOOK_CLIENT_CA"] == "/etc/railyard/webhook-client-ca/ca.crt"
    assert {"name": "webhook-client-ca", "secret": {"secretName": "apiserver-webhook-client-ca", "items": [
        {"key": "ca.crt", "path": "ca.crt"}]}} in pod["volumes"]
    off = render(helm, "maintenance.evictionWebhook.enabled=false")
    assert not by_kind(off, "ValidatingWebhookConfiguration")


def test_least_privilege_objects_name_the_operators_account_and_ports(helm):
    docs = render(helm)
    policy = by_kind(docs, "ValidatingAdmissionPolicy")[0]
    account = f"system:serviceaccount:railyard-system:{by_kind(docs, 'ServiceAccount')[0]['metadata']['name']}"
    assert account in policy["spec"]["matchConditions"][0]["expression"]
    assert by_kind(docs, "ValidatingAdmissionPolicyBinding")[0]["spec"] == {
        "policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    ports = [r["ports"][0]["port"] for r in by_kind(docs, "NetworkPolicy")[0]["spec"]["ingress"]]
    assert sorted(ports) == [8080, 8081, 8090]
    off = render(helm, "admissionPolicy.enabled=false", "networkPolicy.enabled=false")
    assert not by_kind(off, "ValidatingAdmissionPolicy") and not by_kind(off, "NetworkPolicy")


def test_rbac_is_exactly_what_the_operator_uses(helm):
    docs = render(helm)
    operator = next(r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "railyard")
    rules = {(r["apiGroups"][0], res): set(r["verbs"]) for r in operator["rules"] for res in r["resources"]}
    assert rules == {
        ("", "nodes"): {"list", "watch", "get", "patch"},
        ("authentication.k8s.io", "tokenreviews"): {"create"},
        ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
        ("", "pods"): {"list", "watch", "get", "create", "patch", "delete"},
        ("", "services"): {"create", "get"},
        ("discovery.k8s.io", "endpointslices"): {"create", "get", "update"},  # the selectorless Service's
        ("", "events"): {"create", "patch"},
        ("railyard.dev", "trainingjobs"): {"list", "watch", "get", "create"},
        ("jobset.x-k8s.io", "jobsets"): {"get"},
        ("batch", "jobs"): {"get"},
        ("scheduling.k8s.io", "podgroups"): {"get"},
        ("railyard.dev", "trainingjobs/status"): {"patch"},
        ("railyard.dev", "trainingjobs/finalizers"): {"update"},
        ("resource.k8s.io", "resourceslices"): {"list", "watch"},
        ("resource.k8s.io", "resourceclaims"): {"list", "watch", "get", "create"},
        ("", "pods/finalizers"): {"update"},  # a claim's blockOwnerDeletion on its pod
    }
    assert not any("namespaces" in r["resources"] for r in operator["rules"])
    role = by_kind(docs, "Role")[0]
    # One Lease per cluster: the same namespace and fixed names for every release (a second fails).
    assert role["metadata"] == {**role["metadata"], "namespace": "kube-system", "name": "railyard-leader-election"}
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "resourceNames": ["railyard-operator"], "verbs": ["get", "update"]}]


def test_optional_monitoring_objects_render_the_plain_rule_file(helm):
    docs = render(helm, "prometheusRule.enabled=true", "prometheusRule.runbookBaseURL=https://docs.example/",
                  "metrics.serviceMonitor.enabled=true", "dashboard.enabled=true")
    rule = by_kind(docs, "PrometheusRule")[0]
    plain = yaml.safe_load((CHART / "files" / "railyard-alerts.yaml").read_text())
    rendered = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    source = [r for g in plain["groups"] for r in g["rules"]]
    assert [(r["alert"], r["expr"].strip(), r["for"]) for r in rendered] == \
        [(r["alert"], r["expr"].strip(), r["for"]) for r in source]
    assert all(r["annotations"]["runbook_url"].startswith("https://docs.example/docs/runbooks.md#") for r in rendered)
    assert "{{ $value" in str(rendered), "Prometheus templates must reach Prometheus unexpanded"
    monitor = by_kind(docs, "ServiceMonitor")[0]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    dashboard = by_kind(docs, "ConfigMap")[0]
    assert '"title": "Railyard"' in dashboard["data"]["railyard.json"]


def test_topology_levels_reach_the_operator_as_one_definition(helm):
    def env(docs: list[dict]) -> dict[str, str]:
        container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]}

    assert "RAILYARD_TOPOLOGY_LEVELS" not in env(render(helm))
    docs = render(helm, "topologyLevels[0].name=zone", "topologyLevels[0].label=example.com/zone",
                  "topologyLevels[1].name=spine", "topologyLevels[1].label=topology.railyard.dev/spine",
                  "topologyLevels[2].name=nvlink")
    assert env(docs)["RAILYARD_TOPOLOGY_LEVELS"] == "zone=example.com/zone,spine=topology.railyard.dev/spine,nvlink"


@pytest.mark.parametrize("bad", ["replicaCount=0", "labelPreset=martian", "image.pullPolicy=Sometimes",
                                 "metrics.port=70000", "topologyLevels[0].name=Zone"])
def test_the_values_schema_rejects_bad_values(helm, bad):
    out = subprocess.run([helm, "template", "railyard", str(CHART), "--kube-version", KUBE_VERSION, "--set", IMAGE,
                          "--set", bad], capture_output=True, text=True)
    assert out.returncode != 0 and "values don't meet the specifications" in out.stderr, out.stderr


def test_no_default_image_outside_the_projects_control_the_chart_says_what_to_set(helm):
    out = subprocess.run([helm, "template", "railyard", str(CHART), "--kube-version", KUBE_VERSION],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "image.repository is required" in out.stderr, out.stderr
    container = by_kind(render(helm, "image.tag=1.2.3"), "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/railyard:1.2.3"


def test_tls_material_is_stable_under_helm_template_with_an_existing_secret(helm):
    """GitOps renders with `helm template`, where lookup finds nothing: the generated CA changes every time;
    an admin's Secret (or cert-manager) keeps every render the same."""
    generated = [by_kind(render(helm), "Secret")[0]["data"]["ca.crt"] for _ in range(2)]
    assert generated[0] != generated[1], "documented: a render without a cluster generates a new CA"
    sets = ("reports.tls.existingSecret=my-tls", "reports.tls.caBundle=Q0E=")
    first, second = render(helm, *sets), render(helm, *sets)
    assert first == second and not by_kind(first, "Secret") and not by_kind(first, "Certificate")
    pod = by_kind(first, "Deployment")[0]["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "reports-tls")["secret"]["secretName"] == "my-tls"
    assert by_kind(first, "ValidatingWebhookConfiguration")[0]["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    out = subprocess.run([helm, "template", "railyard", str(CHART), "--kube-version", KUBE_VERSION, "--set", IMAGE,
                          "--set", "reports.tls.existingSecret=my-tls"], capture_output=True, text=True)
    assert out.returncode != 0 and "reports.tls.caBundle is required" in out.stderr, out.stderr


def test_tenants_get_trainingjobs_through_the_built_in_roles(helm):
    roles = {r["metadata"]["name"]: r for r in by_kind(render(helm), "ClusterRole")}
    edit, view = roles["railyard-edit"], roles["railyard-view"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    verbs = {res: set(r["verbs"]) for r in edit["rules"] for res in r["resources"]}
    assert {"create", "delete", "patch"} <= verbs["trainingjobs"] and "update" in verbs["trainingjobs/scale"]
    assert "update" not in verbs["trainingjobs/status"], "status is the operator's"
    assert all(set(r["verbs"]) == {"get", "list", "watch"} for r in view["rules"])
    off = {r["metadata"]["name"] for r in by_kind(render(helm, "rbac.aggregateToDefaultRoles=false"), "ClusterRole")}
    assert off == {"railyard"}


def test_the_common_value_keys_are_accepted_and_applied(helm):
    docs = render(helm, "fullnameOverride=gang", "podAnnotations.team=ml", "podLabels.tier=ops",
                  "serviceAccount.annotations.iam=role-x", "global.imageRegistry=r.example")
    deploy = by_kind(docs, "Deployment")[0]
    assert deploy["metadata"]["name"] == "gang"
    template = deploy["spec"]["template"]
    assert template["metadata"]["annotations"] == {"team": "ml"} and template["metadata"]["labels"]["tier"] == "ops"
    account = by_kind(docs, "ServiceAccount")[0]
    assert account["metadata"] == {**account["metadata"], "name": "gang", "annotations": {"iam": "role-x"}}
    assert template["spec"]["serviceAccountName"] == "gang"
    assert by_kind(render(helm, "nameOverride=rail"), "Deployment")[0]["metadata"]["name"] == "railyard-rail"
    theirs = render(helm, "serviceAccount.create=false", "serviceAccount.name=platform-sa")
    assert not by_kind(theirs, "ServiceAccount")
    assert by_kind(theirs, "Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"] == "platform-sa"
    assert "system:serviceaccount:railyard-system:platform-sa" in \
        by_kind(theirs, "ValidatingAdmissionPolicy")[0]["spec"]["matchConditions"][0]["expression"]


def test_the_api_servers_addresses_reach_the_webhook_port_through_the_network_policy(helm):
    policy = by_kind(render(helm, "networkPolicy.apiServerCIDRs[0]=10.0.0.0/24"), "NetworkPolicy")[0]
    reports = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8090)
    assert reports["from"] == [{"namespaceSelector": {}}, {"ipBlock": {"cidr": "10.0.0.0/24"}}]


def test_the_gang_pod_webhook_gates_only_opted_in_pods_and_fails_closed(helm):
    docs = render(helm)
    hook = by_kind(docs, "MutatingWebhookConfiguration")[0]["webhooks"][0]
    assert hook["clientConfig"]["service"]["path"] == "/v1/gang-pods" and hook["failurePolicy"] == "Fail"
    assert hook["objectSelector"] == {"matchLabels": {"railyard.dev/scheduling": "gang"}}
    assert hook["rules"][0]["operations"] == ["CREATE"], "never on updates (the gate's removal is one)"
    assert "railyard-system" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert not by_kind(render(helm, "workloads.podWebhook.enabled=false"), "MutatingWebhookConfiguration")
