"""Stage train: fit the GPT decoder on the train tokens → models/, the per-step log and train metrics."""

import argparse
from pathlib import Path

from solomon.errors import run_main
from solomon.params import load_params
from solomon.train.loop import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("tokens_dir", "model_dir", "log_path", "metrics_path"):
        parser.add_argument(name, type=Path)
    args = parser.parse_args()
    metrics = train(load_params(), args.tokens_dir, args.model_dir, args.log_path, args.metrics_path)
    print(f"train: {metrics}")


if __name__ == "__main__":
    run_main(main)
