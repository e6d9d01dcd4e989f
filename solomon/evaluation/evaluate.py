"""The evaluate stage: the final model's held-out scores (``solomon.evaluation.heldout``) and its calibration
(``solomon.evaluation.calibration``) on the val and test splits, from one pass over each."""

from __future__ import annotations

from pathlib import Path

from solomon.atomic import write_json
from solomon.data.tokenizer import load_tokenizer, open_tokens, token_byte_lengths
from solomon.errors import SolomonError
from solomon.evaluation.calibration import ReliabilityBins, calibration_errors
from solomon.evaluation.heldout import HeldOutScore, predictions
from solomon.model import weights
from solomon.params import EvalParams
from solomon.runtime import configure_torch

EVAL_SPLITS = ("val", "test")


def evaluate(
    params: EvalParams, model_dir: Path, tokens_dir: Path, tokenizer_path: Path, out: Path, reliability_dir: Path
) -> dict:
    """Write ``out`` (metrics.json: per split loss, perplexity, bits per byte, accuracy, ECE, MCE) and
    ``reliability_dir/<split>.json`` (the reliability diagram's bins); return the metrics."""
    configure_torch(params.threads)
    model = weights.load(model_dir)
    byte_lengths = token_byte_lengths(load_tokenizer(tokenizer_path))
    if len(byte_lengths) != model.config.vocab_size:
        raise SolomonError(
            f"tokenizer has {len(byte_lengths)} tokens but the model expects {model.config.vocab_size}: "
            "retrain with `dvc repro`"
        )
    metrics, reliability = {}, {}
    for split in EVAL_SPLITS:
        score, calibration = HeldOutScore(byte_lengths), ReliabilityBins()
        for logits, targets in predictions(model, open_tokens(tokens_dir, split), params.batch_size, params.max_tokens):
            score.add(logits, targets)
            calibration.add(logits, targets)
        reliability[split] = calibration.bins(params.calibration_bins)
        metrics[split] = score.result() | calibration_errors(reliability[split])
    for split, bins in reliability.items():
        write_json(reliability_dir / f"{split}.json", bins)
    write_json(out, metrics)
    return metrics
