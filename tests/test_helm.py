"""The MLflow Helm chart: `helm lint --strict` and `helm template`, when helm is on PATH."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from conftest import ROOT

CHART = ROOT / "k8s/helm"
HELM = shutil.which("helm")
pytestmark = pytest.mark.skipif(HELM is None, reason="helm is not on PATH (see README: Kubernetes)")


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([HELM, *args], capture_output=True, text=True)


def test_chart_lints_strictly() -> None:
    done = helm("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr


def test_chart_renders_server_with_postgres_secret_auth_and_probes() -> None:
    done = helm("template", "solomon", str(CHART))
    assert done.returncode == 0, done.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(done.stdout) if d}
    assert {"Deployment", "Service", "PersistentVolumeClaim", "ConfigMap"} <= set(docs)
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert "mlflow db upgrade" in " ".join(pod["initContainers"][0]["command"])
    server = pod["containers"][0]
    command = " ".join(server["command"])
    assert "--app-name basic-auth" in command and "--allowed-hosts" in command and "--serve-artifacts" in command
    env = {e["name"]: e for e in server["env"]}
    assert env["MLFLOW_BACKEND_STORE_URI"]["valueFrom"]["secretKeyRef"]["name"] == "solomon-mlflow-db"
    assert "secretKeyRef" in env["MLFLOW_AUTH_ADMIN_PASSWORD"]["valueFrom"]
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"]["value"] == "false"
    assert server["livenessProbe"]["httpGet"]["path"] == server["readinessProbe"]["httpGet"]["path"] == "/health"
    assert server["resources"]["limits"]
    assert "bitnami" not in done.stdout.lower()
    assert "admin_password" not in docs["ConfigMap"]["data"]["basic_auth.ini"]


def test_chart_refuses_auth_without_a_secret() -> None:
    done = helm("template", "solomon", str(CHART), "--set", "auth.secretName=")
    assert done.returncode != 0
    assert "the default admin password must never be used" in done.stderr
