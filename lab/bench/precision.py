"""What serving in bf16 costs a trained model: the evaluate stage's held-out figures (``SplitScores``: loss,
bits per byte, accuracy, ECE) on val and test with the model computing in each serving precision
(``solomon.serving.precision``), side by side.

    python -m lab.bench.precision [--model-dir models] [--tokens-dir data/tokens]
        [--tokenizer data/tokenizer.json] [--threads 2]

reads the workspace's model, token files and tokenizer (a `make run` leaves them) and prints one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import numpy as np

from solomon import records
from solomon.data.tokens import load_tokenizer, open_tokens, token_byte_lengths
from solomon.errors import run_main
from solomon.evaluation.evaluate import EVAL_SPLITS, SplitScores
from solomon.evaluation.heldout import predictions
from solomon.model import weights
from solomon.model.gpt import GPT
from solomon.params import EvalParams
from solomon.runtime import configure_torch
from solomon.serving.limits import PRECISIONS
from solomon.serving.precision import in_precision

FIGURES = ("loss", "bits_per_byte", "accuracy", "ece")


def precision_scores(model: GPT, splits: dict[str, np.ndarray], byte_lengths: np.ndarray, batch_size: int) -> dict:
    """{precision: {split: figures}} for every serving precision, on a copy of ``model`` each."""
    scores = {}
    for precision in PRECISIONS:
        served = in_precision(copy.deepcopy(model), precision)
        scores[precision] = {}
        for split, tokens in splits.items():
            scored = SplitScores(byte_lengths)
            for logits, targets in predictions(served, tokens, batch_size, None):
                scored.add(logits, targets)
            figures = scored.result(EvalParams().calibration_bins)[0]
            scores[precision][split] = {key: figures[key] for key in FIGURES}
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path(records.MODEL_DIR))
    parser.add_argument("--tokens-dir", type=Path, default=Path(records.TOKENS_DIR))
    parser.add_argument("--tokenizer", type=Path, default=Path(records.TOKENIZER))
    parser.add_argument("--threads", type=int, default=EvalParams().threads)
    args = parser.parse_args()
    configure_torch(args.threads)
    splits = {split: open_tokens(args.tokens_dir, split) for split in EVAL_SPLITS}
    byte_lengths = token_byte_lengths(load_tokenizer(args.tokenizer))
    scores = precision_scores(weights.load(args.model_dir), splits, byte_lengths, EvalParams().batch_size)
    print(json.dumps(scores, indent=2))


if __name__ == "__main__":
    run_main(main)
