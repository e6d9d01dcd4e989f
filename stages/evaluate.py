"""Stage evaluate: val and test loss, perplexity, bits per byte, accuracy, ECE and MCE → metrics.json; the
reliability diagram's bins → <reliability_dir>/{val,test}.json."""

import argparse
from pathlib import Path

from solomon.evaluation.evaluate import evaluate
from solomon.params import load_params
from solomon.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("model_dir", "tokens_dir", "tokenizer_path", "metrics_path", "reliability_dir"):
        parser.add_argument(name, type=Path)
    args = parser.parse_args()
    metrics = evaluate(
        load_params().eval,
        args.model_dir,
        args.tokens_dir,
        args.tokenizer_path,
        args.metrics_path,
        args.reliability_dir,
    )
    print(f"evaluate: {metrics}")


if __name__ == "__main__":
    run_stage(main)
