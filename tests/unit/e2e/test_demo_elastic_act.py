"""make demo's elastic act: what it does to KEDA's manifests, the certificate it makes KEDA,
and the Prometheus configuration it writes (issue 19). The act itself runs on the testbed
with ``make demo`` once ``make keda-bin`` has built KEDA."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from popfleet_e2e import beside, elastic, observe, scenario
from popfleet_e2e.access import ClusterAccess, ScenarioError

KEDA = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: scaledobjects.keda.sh}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: keda-operator, namespace: keda}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keda-operator, namespace: keda}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keda-metrics-apiserver, namespace: keda}
---
apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec:
  ports: [{name: https, port: 443, targetPort: 6443}]
  selector: {app: keda-metrics-apiserver}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  service: {name: keda-metrics-apiserver, namespace: keda}
  group: external.metrics.k8s.io
  version: v1beta1
"""
NOW = datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC)


def test_keda_beside_the_testbed_keeps_everything_but_its_deployments() -> None:
    crds, rest = beside.keda_objects(KEDA, ca_pem=b"CA", adapter_port=40123)
    assert [c["metadata"]["name"] for c in crds] == ["scaledobjects.keda.sh"]
    assert [(d["kind"], d["metadata"]["name"]) for d in rest] == [
        ("ServiceAccount", "keda-operator"),
        ("Service", "keda-metrics-apiserver"),
        ("APIService", "v1beta1.external.metrics.k8s.io"),
    ]


def test_the_aggregator_is_sent_to_the_adapter_on_loopback_with_our_ca() -> None:
    _, rest = beside.keda_objects(KEDA, ca_pem=b"CA", adapter_port=40123)
    service, apiservice = rest[1], rest[2]
    # no selector, no ClusterIP: the aggregator proxies to https://<externalName>:<port>
    assert service["spec"] == {
        "type": "ExternalName",
        "externalName": "localhost",
        "ports": [{"name": "https", "port": 40123, "protocol": "TCP"}],
    }
    assert apiservice["spec"]["service"]["port"] == 40123
    assert base64.b64decode(apiservice["spec"]["caBundle"]) == b"CA"
    assert "insecureSkipTLSVerify" not in apiservice["spec"]


@pytest.mark.parametrize("missing", ["Deployment", "APIService"])
def test_manifests_without_what_the_act_changes_are_refused(missing: str) -> None:
    docs = [d for d in KEDA.split("---\n") if f"kind: {missing}\n" not in d]
    with pytest.raises(ScenarioError, match="KEDA's manifests"):
        beside.keda_objects("---\n".join(docs), ca_pem=b"CA", adapter_port=1)


def test_one_certificate_serves_the_adapter_and_both_ends_of_the_grpc() -> None:
    certs = beside.certificates(now=NOW)
    ca = x509.load_pem_x509_certificate(certs.ca_pem)
    cert = x509.load_pem_x509_certificate(certs.cert_pem)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # the aggregator checks the adapter as <service>.<namespace>.svc; the adapter dials the
    # operator's gRPC at localhost
    assert {"keda-metrics-apiserver.keda.svc", "localhost"} <= set(
        sans.get_values_for_type(x509.DNSName)
    )
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert cert.not_valid_after_utc > NOW + datetime.timedelta(days=1)


def test_the_key_file_is_private(tmp_path: Path) -> None:
    beside.certificates(now=NOW).write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0


def test_prometheus_labels_broker_targets_as_the_chart_podmonitor_does() -> None:
    config = beside.prometheus_config(
        kubeconfig=Path("/run/kc"), namespaces=["demo"], release="popfleet",
        release_namespace="popfleet-system",
    )  # fmt: skip
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "popfleet-system/popfleet-brokers"  # prometheus-operator's form
    (sd,) = job["kubernetes_sd_configs"]
    assert sd == {"role": "pod", "kubeconfig_file": "/run/kc", "namespaces": {"names": ["demo"]}}
    targets = {r.get("target_label") for r in job["relabel_configs"]}
    assert {"role", "namespace", "pod", "cluster"} <= targets
    keep = [r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert keep == ["popfleet-broker", "metrics-(store|popack|revive|front)"]


def test_the_act_runs_the_kind_keda_story_after_its_own_two_steps() -> None:
    steps = beside.act(info=None, builds=beside.Builds(Path("/k"), Path("/p")))  # type: ignore[arg-type]
    assert steps[2:] == scenario.ELASTIC
    assert len(steps) == 5


def test_a_missing_build_says_which_make_target_builds_it(tmp_path: Path) -> None:
    prometheus = tmp_path / "prometheus"
    builds = beside.Builds(keda_bin=tmp_path / "keda", prometheus=prometheus)
    assert "make keda-bin" in builds.missing()
    (tmp_path / "keda").mkdir()
    (tmp_path / "keda" / ".complete").touch()
    assert "make prometheus-bin" in builds.missing()
    prometheus.touch()
    assert builds.missing() == ""


def test_stop_ends_only_recorded_processes_that_still_run(tmp_path: Path) -> None:
    layout = beside.Layout(tmp_path)
    layout.pids.mkdir(parents=True)
    (layout.pids / "10-prometheus.pid").write_text("999999999 1\n")  # no such process
    assert beside.stop(tmp_path) == []
    assert not list(layout.pids.iterdir())


def test_on_kind_consumers_and_keda_use_the_cluster_names_beside_the_testbed_loopback() -> None:
    kind = ClusterAccess(kubeconfig=Path("/kc"), namespace="story", bootstrap_via_service=True)
    assert elastic.pod_endpoints(kind) == "elastic.story.svc:8081"
    assert elastic.in_cluster_prometheus(kind) == (
        "http://prometheus-operated.popfleet-monitoring.svc:9090"
    )
    testbed = dataclasses.replace(kind, prometheus_url="http://127.0.0.1:40000")
    assert elastic.in_cluster_prometheus(testbed) == "http://127.0.0.1:40000"
    assert observe.PrometheusApi(testbed).direct == ("127.0.0.1", 40000)


def test_prometheus_beside_the_testbed_must_be_on_loopback() -> None:
    access = ClusterAccess(
        kubeconfig=Path("/kc"), namespace="story", prometheus_url="http://10.0.0.1:9090"
    )
    with pytest.raises(ScenarioError, match="non-loopback"):
        observe.PrometheusApi(access)
