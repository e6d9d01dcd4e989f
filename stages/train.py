"""Stage train: fit the GPT decoder on the train tokens, resuming from checkpoints/ after an interruption.

Writes the best evaluated model to models/, the per-step log, the evaluation/sample log and train metrics, and
streams the run to MLflow as it goes when tracking.enabled (never a reason to stop).
Exit status 128 + N after signal N (SIGTERM: 143, SIGINT: 130), once a checkpoint is written.
"""

import argparse
from pathlib import Path

from solomon.errors import run_main
from solomon.params import load_params
from solomon.train.loop import TrainPaths, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("tokens_dir", "tokenizer", "model_dir", "checkpoints", "steps_log", "evals_log", "metrics"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--fresh", action="store_true", help="delete existing checkpoints and start at step 0")
    args = parser.parse_args()
    paths = TrainPaths(**{k: v for k, v in vars(args).items() if k != "fresh"})
    params = load_params()
    tracker = None
    if params.tracking.enabled:
        from solomon.tracking import LiveTracker  # imports mlflow: only when tracking

        tracker = LiveTracker(params)
    metrics = train(params, paths, fresh=args.fresh, tracker=tracker)
    print(f"train: {metrics}")


if __name__ == "__main__":
    run_main(main)
