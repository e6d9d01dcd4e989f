"""The registered model as MLflow serves it (issue 29): `solomon promote` registers a python_function model whose
loading verifies every file against the run's manifest, and which is what `solomon export --format mlflow` writes;
`mlflow.pyfunc.load_model(...).predict(...)` and a real `mlflow models serve` subprocess on loopback answer with the
text `solomon generate --seed N` prints."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import latest_run_dir, tree_digest, wait_until
from serve_helpers import PROMPT, SETTINGS, free_port, generated

from lab.scratch import write_params
from solomon.errors import SolomonError
from solomon.export.mlflow_model import export_mlflow
from solomon.pipeline import pipeline_env

BIN = Path(sys.executable).parent


def model_files(model: Path) -> dict:
    """An MLflow model directory's SHA256 by file, its MLmodel parsed (creation time and uuid aside); without the
    export's provenance.json and the registered_model_meta MLflow writes when it downloads a models:/ URI."""
    aside = ("MLmodel", "provenance.json", "registered_model_meta")
    files = {name: sha for name, sha in tree_digest(model).items() if name not in aside}
    mlmodel = yaml.safe_load((model / "MLmodel").read_text())
    return files | {"MLmodel": {k: v for k, v in mlmodel.items() if k not in ("utc_time_created", "model_uuid")}}


@pytest.fixture
def promoted(repo_copy: Path) -> Path:
    write_params(repo_copy, {"promote": {"max": {"test.bits_per_byte": 8.0}}})
    done = subprocess.run(
        [str(BIN / "solomon"), "promote", str(latest_run_dir(repo_copy))],
        cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return repo_copy


def test_load_model_predicts_the_text_solomon_generate_prints_and_refuses_a_tampered_model(
    promoted: Path, tmp_path: Path, monkeypatch
) -> None:
    import mlflow.pyfunc
    import pandas as pd
    from mlflow.artifacts import download_artifacts

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{promoted / 'mlflow.db'}")
    model = mlflow.pyfunc.load_model("models:/solomon@champion")
    assert model.metadata.signature.inputs.input_names() == ["prompt"]
    assert [p.name for p in model.metadata.signature.params] == ["max_tokens", "temperature", "top_k", "seed"]
    assert model.predict(pd.DataFrame({"prompt": [PROMPT]}), params=SETTINGS) == [generated(promoted)]
    local = Path(download_artifacts("models:/solomon@champion", dst_path=str(tmp_path / "copy")))
    # What promote registered is what `solomon export --format mlflow` writes (one builder): file for file, byte
    # for byte, MLmodel field for field but its creation time and uuid; the export adds provenance.json.
    exported = export_mlflow(latest_run_dir(promoted), promoted, tmp_path / "export")
    assert model_files(local) == model_files(exported) and (exported / "provenance.json").is_file()
    # A copy of the registered model with one changed byte of its weights does not load.
    weights = next(local.glob("data/*/models/model.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(SolomonError, match=r"models/model\.safetensors: SHA256 mismatch"):
        mlflow.pyfunc.load_model(str(local))


def test_mlflow_models_serve_answers_invocations_with_the_same_text(promoted: Path, tmp_path: Path) -> None:
    port = free_port()
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 (closed in finally) a file: a full pipe would block it
    env = pipeline_env() | {"MLFLOW_TRACKING_URI": f"sqlite:///{promoted / 'mlflow.db'}"}
    server = subprocess.Popen(
        [str(BIN / "mlflow"), "models", "serve", "-m", "models:/solomon@champion", "--env-manager", "local",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=promoted, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:

        def answer() -> dict | None:
            body = json.dumps({"dataframe_split": {"columns": ["prompt"], "data": [[PROMPT]]}, "params": SETTINGS})
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/invocations", body.encode(), {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return json.loads(response.read())
            except OSError:
                return None

        found: list[dict] = []
        what = f"mlflow models serve answering (log: {tmp_path / 'serve.log'})"
        wait_until(lambda: found.append(answer()) or found[-1], what, process=server, timeout=180, interval=1)
        assert found[-1] == {"predictions": [generated(promoted)]}
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.mark.parametrize("family", ["gpt2", "qwen3"])
def test_each_familys_mlflow_export_predicts_the_text_solomon_generate_prints(
    family_repo, tmp_path: Path, family: str
) -> None:
    import mlflow.pyfunc
    import pandas as pd

    repo = family_repo(family)
    exported = export_mlflow(latest_run_dir(repo), repo, tmp_path / "export")
    model = mlflow.pyfunc.load_model(str(exported))
    assert model.predict(pd.DataFrame({"prompt": [PROMPT]}), params=SETTINGS) == [generated(repo)]
