"""The MLflow export (issue 29): `solomon export --format mlflow` writes the python_function model `solomon
promote` registers as a directory; `mlflow.pyfunc.load_model(DIR).predict(...)` gives the text `solomon generate
--seed N` prints; `verify_export` passes on it and fails, in one line naming the first file or MLmodel field that
differs, on every tamper, forged provenance hashes included. (Its refusals: tests/test_export.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from conftest import flip_last_byte, latest_run_dir, one_line_refusal, rehash_export
from serve_helpers import PROMPT, SETTINGS, generated

from solomon.atomic import write_json
from solomon.audit import manifest
from solomon.export import record
from solomon.export.check import verify_export
from solomon.export.mlflow_model import MLMODEL

SERVED = "data/root"  # where MLflow keeps the model's serving root


def edit_mlmodel(export_dir: Path, change) -> None:
    mlmodel = yaml.safe_load((export_dir / MLMODEL).read_text())
    change(mlmodel)
    (export_dir / MLMODEL).write_text(yaml.safe_dump(mlmodel))


def test_the_mlflow_export_loads_and_predicts_the_text_solomon_generate_prints(
    built_repo: Path, mlflow_export: Path
) -> None:
    import mlflow.pyfunc
    import pandas as pd

    run_dir = latest_run_dir(built_repo)
    digest = manifest.digest_of((run_dir / "manifest.json").read_bytes())
    model = mlflow.pyfunc.load_model(str(mlflow_export))
    assert model.predict(pd.DataFrame({"prompt": [PROMPT]}), params=SETTINGS) == [generated(built_repo)]

    mlmodel = yaml.safe_load((mlflow_export / MLMODEL).read_text())
    flavour = mlmodel["flavors"]["python_function"]
    assert flavour["loader_module"] == "solomon.export.pyfunc" and flavour["data"] == SERVED
    assert flavour["config"] == {"run_dir": f"reports/training/{run_dir.name}", "manifest_sha256": digest}
    provenance = json.loads((mlflow_export / record.PROVENANCE).read_text())
    assert provenance["format"] == "mlflow" and provenance["run_id"] == run_dir.name
    assert provenance["manifest_sha256"] == digest and provenance["files"] == record.exported_files(mlflow_export)
    assert f"{SERVED}/models/model.safetensors" in provenance["files"] and MLMODEL in provenance["files"]
    verified = verify_export(mlflow_export, built_repo)
    assert (
        verified.startswith(f"{mlflow_export}: mlflow export of run {run_dir.name} verified: ") and digest in verified
    )


def test_verify_export_of_an_mlflow_export_fails_on_every_tamper(built_repo: Path, mlflow_export: Path, tmp_path):
    run_id = latest_run_dir(built_repo).name
    weights = f"{SERVED}/models/model.safetensors"
    run_copy = f"{SERVED}/reports/training/{run_id}"

    def config_manifest(mlmodel: dict) -> None:
        mlmodel["flavors"]["python_function"]["config"]["manifest_sha256"] = "0" * 64

    def loader(mlmodel: dict) -> None:
        mlmodel["flavors"]["python_function"]["loader_module"] = "mlflow.pytorch"

    def metadata(mlmodel: dict) -> None:
        mlmodel["metadata"]["solomon.run_dir"] = "reports/training/elsewhere"

    cases = [
        (lambda e: flip_last_byte(e / weights), False, f"{weights}: SHA256 mismatch"),
        (lambda e: flip_last_byte(e / weights), True, "is not the manifest's models/model.safetensors"),
        (lambda e: edit_mlmodel(e, config_manifest), True,
         f"{MLMODEL}: field flavors.python_function.config.manifest_sha256 is '{'0' * 64}'"),
        (lambda e: edit_mlmodel(e, loader), True, f"{MLMODEL}: field flavors.python_function.loader_module"),
        (lambda e: edit_mlmodel(e, metadata), True, f"{MLMODEL}: field metadata.solomon.run_dir"),
        (lambda e: (e / SERVED / "data/tokenizer.json").unlink(), True, "data/tokenizer.json: missing from the export"),
        (lambda e: (e / SERVED / "extra.bin").write_bytes(b"x"), True, "extra.bin: not a file of a mlflow export"),
        (lambda e: flip_last_byte(e / run_copy / "manifest.json"), True, "manifest.json: not run"),
        (lambda e: (e / run_copy / "metrics.json").write_text("{}"), True, "metrics.json: not what run"),
        (lambda e: write_json(e / record.PROVENANCE, json.loads((e / record.PROVENANCE).read_text())
                              | {"run_id": "20990101T000000Z-00000000"}), False,
         "names run 20990101T000000Z-00000000, which is not among the runs"),
    ]  # fmt: skip
    for index, (tamper, forged, expected) in enumerate(cases):
        tampered = Path(shutil.copytree(mlflow_export, tmp_path / f"case{index}"))
        tamper(tampered)
        if forged:
            rehash_export(tampered)
        message = one_line_refusal(verify_export, tampered, built_repo)
        assert expected in message, (expected, message)
    assert "verified" in verify_export(mlflow_export, built_repo)  # the original was never touched
