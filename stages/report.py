"""Stage report: a new run directory under report.root with the full record of this run."""

import argparse
from pathlib import Path

from solomon.errors import run_main
from solomon.params import load_params
from solomon.report.run import create_run
from solomon.tracking import sync_or_warn, tracking_uri

INPUTS = ("metrics", "train_metrics", "train_log", "train_evals", "datacard_md", "datacard_json", "model", "tokenizer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in INPUTS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=Path, required=True)
    parser.add_argument("--latest", type=Path, required=True, help="where to write the pointer to this run")
    args = parser.parse_args()
    params = load_params()
    files = {name: getattr(args, name) for name in INPUTS}
    run_dir = create_run(params, Path("params.yaml"), files, Path(params.report.root), args.latest)
    print(f"report: {run_dir}")
    if params.tracking.enabled:
        mlflow_run = sync_or_warn(run_dir, model_dir=args.model.parent)
        if mlflow_run:
            print(f"report: logged to MLflow run {mlflow_run} at {tracking_uri()}")


if __name__ == "__main__":
    run_main(main)
