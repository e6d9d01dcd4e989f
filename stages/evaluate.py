"""Stage evaluate: val and test loss, perplexity, bits per byte, accuracy, ECE and MCE, and the benchmark tasks'
scores (eval.tasks, run by lm-eval) → metrics.json; the reliability diagram's bins → <reliability_dir>/{val,test}.json;
the built-in tasks' data → <task_data_dir>; a sample of each task's scored requests → <task_requests>."""

import os

from solomon.lifeline import tether

tether(os.environ)  # first, before the imports below: a launcher gone while this stage was starting stops it here

import argparse
from pathlib import Path

from solomon.evaluation.evaluate import TaskPaths, evaluate
from solomon.params import load_params
from solomon.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("model_dir", "tokens_dir", "tokenizer_path", "metrics_path", "reliability_dir"):
        parser.add_argument(name, type=Path)
    for name in ("--corpus-dir", "--task-data-dir", "--task-requests"):
        parser.add_argument(name, type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")  # lm-eval's progress bars: noise in the stage's log
    metrics = evaluate(
        load_params().eval,
        args.model_dir,
        args.tokens_dir,
        args.tokenizer_path,
        args.metrics_path,
        args.reliability_dir,
        TaskPaths(args.corpus_dir, args.task_data_dir, Path.cwd(), args.task_requests),
    )
    print(f"evaluate: {metrics}")


if __name__ == "__main__":
    run_stage(main)
