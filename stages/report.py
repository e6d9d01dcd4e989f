"""Stage report: the run directory reports/training/<run-id>/ with the full record of this run and its SHA256
manifest; then the run is logged to MLflow (never a reason to fail)."""

import argparse
import json
from pathlib import Path

from solomon.data.corpus import source_files
from solomon.errors import run_main
from solomon.params import load_params
from solomon.report.run import Provenance, create_run

INPUTS = (
    "metrics",
    "train_metrics",
    "train_log",
    "train_evals",
    "datacard_md",
    "datacard_json",
    "reliability_val",
    "reliability_test",
    "model",
    "tokenizer",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in INPUTS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=Path, required=True)
    parser.add_argument("--latest", type=Path, required=True, help="where to write the pointer to this run")
    args = parser.parse_args()
    params = load_params()
    files = {name: getattr(args, name) for name in INPUTS}
    run_id = json.loads(files["train_metrics"].read_text(encoding="utf-8")).get("run_id")
    mlflow_run = None
    if params.tracking.enabled and run_id:
        from solomon.tracking import open_run_or_warn  # imports mlflow: only when tracking

        mlflow_run = open_run_or_warn(run_id, params)
    provenance = Provenance(
        repo_root=Path("."),
        corpus_files=source_files(params.corpus),
        dvc_lock=Path("dvc.lock"),
        requirements_lock=Path("requirements.lock"),
        mlflow_run=mlflow_run,
    )
    run_dir = create_run(params, Path("params.yaml"), files, Path(params.report.root), args.latest, provenance)
    print(f"report: {run_dir}")
    if params.tracking.enabled:
        from solomon.tracking import sync_or_warn, tracking_uri

        if sync_or_warn(run_dir, model_dir=args.model.parent):
            print(f"report: logged to MLflow at {tracking_uri()}")


if __name__ == "__main__":
    run_main(main)
