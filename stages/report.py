"""Stage report: the run directory <report.root>/<run-id>/ with the full record of this run and its SHA256
manifest; then the run is logged to MLflow (never a reason to fail)."""

import os

from solomon.lifeline import tether

tether(os.environ)  # first, before the imports below: a launcher gone while this stage was starting stops it here

import argparse
from pathlib import Path

from solomon import records
from solomon.data.sources import source_files
from solomon.params import load_params
from solomon.records import RECORD_FILES, read_json
from solomon.report.run import Provenance, create_run
from solomon.stage import run_stage

# input name -> what dvc.yaml passes: the files copied into the run directory, then the model and tokenizer the
# run is logged with.
INPUTS = {
    **{name: f"{path} (copied into the run directory as {copy})" for name, (path, copy) in RECORD_FILES.items()},
    "model": records.WEIGHTS,
    "tokenizer": records.TOKENIZER,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name, text in INPUTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=Path, required=True, help=text)
    parser.add_argument(
        "--latest", type=Path, required=True, help=f"where to write the pointer to this run: {records.LATEST}"
    )
    args = parser.parse_args()
    params = load_params()
    files = {name: getattr(args, name) for name in INPUTS}
    run_id = read_json(files["train_run"]).get("run_id")
    mlflow_run = None
    if params.tracking.enabled and run_id:
        from solomon.tracking.sync import open_run_or_warn  # imports mlflow: only when tracking

        mlflow_run = open_run_or_warn(run_id, params)
    provenance = Provenance(
        repo_root=Path("."),
        corpus_files=source_files(params.corpus),
        dvc_lock=Path(records.DVC_LOCK),
        requirements_lock=Path("requirements.lock"),
        mlflow_run=mlflow_run,
    )
    run_dir = create_run(params, Path(records.PARAMS_FILE), files, Path(params.report.root), args.latest, provenance)
    print(f"report: {run_dir}")
    if params.tracking.enabled:
        from solomon.tracking.store import public_uri
        from solomon.tracking.sync import sync_or_warn

        if sync_or_warn(run_dir, model_dir=args.model.parent):
            print(f"report: logged to MLflow at {public_uri()}")


if __name__ == "__main__":
    run_stage(main)
