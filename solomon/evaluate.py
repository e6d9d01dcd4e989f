"""The evaluate stage: the final model's held-out scores (``solomon.heldout``) on the val and test splits."""

from __future__ import annotations

from pathlib import Path

from solomon import weights
from solomon.atomic import write_json
from solomon.errors import SolomonError
from solomon.heldout import evaluate_tokens
from solomon.params import EvalParams
from solomon.runtime import configure_torch
from solomon.tokenizer import load_tokenizer, open_tokens, token_byte_lengths

EVAL_SPLITS = ("val", "test")


def evaluate(params: EvalParams, model_dir: Path, tokens_dir: Path, tokenizer_path: Path, out: Path) -> dict:
    configure_torch(params.threads)
    model = weights.load(model_dir)
    byte_lengths = token_byte_lengths(load_tokenizer(tokenizer_path))
    if len(byte_lengths) != model.config.vocab_size:
        raise SolomonError(
            f"tokenizer has {len(byte_lengths)} tokens but the model expects {model.config.vocab_size}: "
            "retrain with `dvc repro`"
        )
    metrics = {
        split: evaluate_tokens(
            model, open_tokens(tokens_dir, split), byte_lengths, params.batch_size, params.max_tokens
        )
        for split in EVAL_SPLITS
    }
    write_json(out, metrics)
    return metrics
