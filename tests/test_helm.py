"""The Helm charts (the MLflow server, the multi-node training Job): `helm lint --strict` and `helm template`,
when helm is on PATH."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from conftest import ROOT

CHART = ROOT / "k8s/helm"
TRAIN_CHART = ROOT / "k8s/train"
HELM = shutil.which("helm")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(HELM is None, reason="helm is not on PATH (see docs/kubernetes.md)")]


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


def test_training_chart_lints_and_renders_an_indexed_job_with_torchrun_rendezvous_at_pod_0() -> None:
    done = helm("lint", "--strict", str(TRAIN_CHART), "--set", "image.tag=test")
    assert done.returncode == 0, done.stdout + done.stderr
    done = helm("template", "run-7", str(TRAIN_CHART), "--set", "image.tag=test", "--set", "nodes=3")
    assert done.returncode == 0, done.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(done.stdout) if d}
    assert docs["Service"]["spec"]["clusterIP"] == "None" and docs["Service"]["spec"]["selector"] == {
        "job-name": "run-7"
    }
    job = docs["Job"]["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"] == 3
    pod = job["template"]["spec"]
    assert pod["subdomain"] == "run-7"  # pod 0 resolves as run-7-0.run-7
    command = pod["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "torch.distributed.run"]
    assert {"--nnodes=3", "--rdzv-backend=c10d", "--rdzv-endpoint=run-7-0.run-7:29400"} <= set(command)
    assert "stages/train.py" in command
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "solomon-workspace"


def test_training_chart_refuses_an_unpinned_image() -> None:
    done = helm("template", "run-7", str(TRAIN_CHART))
    assert done.returncode != 0 and "image.tag is required" in done.stderr
