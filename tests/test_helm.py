"""The Helm charts (the MLflow server, the multi-node training Job, serving): `helm lint --strict` and `helm template`,
and every rendered pod against Pod Security "restricted", when helm is on PATH or in the virtualenv (`make helm`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

CHART = ROOT / "k8s/helm"
TRAIN_CHART = ROOT / "k8s/train"
SERVE_CHART = ROOT / "k8s/serve"
HELM = shutil.which("helm") or shutil.which("helm", path=str(Path(sys.executable).parent))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        HELM is None, reason="helm is neither on PATH nor in .venv/bin (`make helm`; docs/kubernetes.md)"
    ),
]
DIGEST = "sha256:" + "0123456789abcdef" * 4
# The charts as they are meant to be installed: the training chart needs its image named, serving its digest.
RENDERINGS = {
    "mlflow": (CHART, []),
    "mlflow, pinned": (CHART, ["--set", f"image.digest={DIGEST}"]),
    "train": (TRAIN_CHART, ["--set", "image.tag=test", "--set", "nodes=3"]),
    "train, pinned": (TRAIN_CHART, ["--set", f"image.digest={DIGEST}"]),
    "serve, pinned": (SERVE_CHART, ["--set", f"image.digest={DIGEST}"]),
}


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


def test_chart_keeps_artifacts_in_an_s3_bucket_with_the_credentials_of_a_secret() -> None:
    default = helm("template", "solomon", str(CHART))
    assert '--artifacts-destination "/mlflow/data/artifacts"' in default.stdout and "AWS_" not in default.stdout
    values = ["destination=s3://team-mlflow/artifacts", "s3.endpointUrl=https://minio.example", "s3.secretName=s3-keys"]
    done = helm(
        "template", "solomon", str(CHART), *[arg for value in values for arg in ("--set", f"artifacts.{value}")]
    )
    assert done.returncode == 0, done.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(done.stdout) if d}
    server = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert '--artifacts-destination "s3://team-mlflow/artifacts"' in " ".join(server["command"])
    env = {e["name"]: e for e in server["env"]}
    assert env["MLFLOW_S3_ENDPOINT_URL"]["value"] == "https://minio.example"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "s3-keys", "key": key}


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
    assert command[:3] == ["python", "-m", "solomon.train.launch"]  # torchrun, ending in one line
    assert {"--nnodes=3", "--rdzv-backend=c10d", "--rdzv-endpoint=run-7-0.run-7:29400"} <= set(command)
    assert "stages/train.py" in command
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "solomon-workspace"


def test_training_chart_refuses_an_unpinned_image() -> None:
    done = helm("template", "run-7", str(TRAIN_CHART))
    assert done.returncode != 0 and "image.digest (or at least image.tag) is required" in done.stderr


def test_serving_chart_lints_and_renders_a_pinned_deployment_ready_on_readyz() -> None:
    done = helm("lint", "--strict", str(SERVE_CHART), "--set", f"image.digest={DIGEST}")
    assert done.returncode == 0, done.stdout + done.stderr
    done = helm("template", "prod", str(SERVE_CHART), "--set", f"image.digest={DIGEST}", "--set", "image.tag=v1")
    assert done.returncode == 0, done.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(done.stdout) if d}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert server["image"] == f"registry.example.com/solomon:v1@{DIGEST}"
    scrape = docs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert scrape["prometheus.io/scrape"] == "true" and scrape["prometheus.io/path"] == "/metrics"
    assert int(scrape["prometheus.io/port"]) == server["ports"][0]["containerPort"]
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert server["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert server["resources"]["limits"] and server["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e["value"] for e in server["env"]}
    assert env["SOLOMON_IMAGE_DIGEST"] == DIGEST  # /v1/provenance reports the image the pod runs
    assert "--host=0.0.0.0" in server["args"] and "--port=8000" in server["args"]
    assert pod["terminationGracePeriodSeconds"] > 60  # longer than a request may take: SIGTERM drains
    service = docs["Service"]["spec"]
    assert service["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["ports"][0]["targetPort"] == "http"


def test_serving_chart_refuses_an_image_without_a_digest() -> None:
    done = helm("template", "prod", str(SERVE_CHART), "--set", "image.tag=v1")
    assert done.returncode != 0 and "image.digest is required" in done.stderr


def pod_specs(rendered: str) -> list[tuple[str, dict]]:
    """(kind/name, pod spec) of every workload in a rendering: Pod, and the pod template of every controller."""
    found = []
    for doc in yaml.safe_load_all(rendered):
        if not doc:
            continue
        kind, spec = doc["kind"], doc.get("spec", {})
        if kind == "Pod":
            pod = spec
        elif kind == "CronJob":
            pod = spec["jobTemplate"]["spec"]["template"]["spec"]
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController"):
            pod = spec["template"]["spec"]
        else:
            continue
        found.append((f"{kind}/{doc['metadata']['name']}", pod))
    return found


def restricted_violations(where: str, pod: dict) -> list[str]:
    """What keeps a pod from Pod Security "restricted" (the checks its containers and volumes can fail)."""
    problems = []
    pod_context = pod.get("securityContext") or {}
    if not pod_context.get("fsGroup"):
        problems.append(f"{where}: no fsGroup: mounted volumes are not writable by the pod's user")
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            problems.append(f"{where}: {flag}")
    problems += [f"{where}: hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v]
    containers = [*pod.get("initContainers", []), *pod.get("containers", []), *pod.get("ephemeralContainers", [])]
    assert containers, where
    for container in containers:
        at = f"{where} container {container['name']}"
        context = container.get("securityContext") or {}
        effective = {**pod_context, **context}  # a container's setting overrides the pod's
        if effective.get("runAsNonRoot") is not True:
            problems.append(f"{at}: runAsNonRoot is not true")
        if effective.get("runAsUser", 1) == 0:
            problems.append(f"{at}: runs as uid 0")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{at}: allowPrivilegeEscalation is not false")
        if context.get("privileged"):
            problems.append(f"{at}: privileged")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{at}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{at}: adds capabilities {capabilities['add']}")
        if (effective.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{at}: no RuntimeDefault seccomp profile")
    return problems


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_every_pod_of_every_chart_meets_pod_security_restricted(rendering: str) -> None:
    chart, values = RENDERINGS[rendering]
    done = helm("template", "solomon", str(chart), *values)
    assert done.returncode == 0, done.stderr
    pods = pod_specs(done.stdout)
    assert pods, done.stdout
    problems = [problem for where, pod in pods for problem in restricted_violations(where, pod)]
    assert not problems, problems
    images = [c["image"] for _, pod in pods for c in [*pod.get("initContainers", []), *pod["containers"]]]
    assert all(image.endswith(f"@{DIGEST}") for image in images) == ("pinned" in rendering), images


def test_the_checker_sees_a_container_that_does_not_meet_restricted() -> None:
    """The check above can fail: a rendering with the container settings taken away does."""
    done = helm("template", "solomon", str(CHART), "--set", "containerSecurityContext=null")
    assert done.returncode == 0, done.stderr
    problems = [p for where, pod in pod_specs(done.stdout) for p in restricted_violations(where, pod)]
    assert any("allowPrivilegeEscalation" in p for p in problems) and any("drop ALL" in p for p in problems)


@pytest.mark.parametrize("chart", [CHART, TRAIN_CHART, SERVE_CHART])
def test_a_digest_that_is_not_a_sha256_is_refused(chart: Path) -> None:
    done = helm("template", "solomon", str(chart), "--set", "image.tag=x", "--set", "image.digest=latest")
    assert done.returncode != 0 and "image.digest must be sha256:" in done.stderr
