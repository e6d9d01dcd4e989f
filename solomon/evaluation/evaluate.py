"""The evaluate stage: the final model's held-out scores (``solomon.evaluation.heldout``) and its calibration
(``solomon.evaluation.calibration``) on the val and test splits, from one pass over each; the temperature that
calibrates it (``solomon.evaluation.temperature``), fitted on val, with the test split's figures under it; and its
benchmark scores (``solomon.evaluation.harness``: lm-eval's tasks named by ``eval.tasks``, the built-in ones' data
made from the test split by ``solomon.evaluation.tasks``), in the same metrics.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from solomon.atomic import write_json, write_text
from solomon.data.tokens import load_tokenizer, open_tokens, read_meta, token_byte_lengths
from solomon.errors import SolomonError
from solomon.evaluation.calibration import ReliabilityBins, calibration_errors
from solomon.evaluation.harness import score_tasks
from solomon.evaluation.heldout import HeldOutScore, predictions
from solomon.evaluation.tasks import build_task_data
from solomon.evaluation.temperature import TemperatureSample
from solomon.model import weights
from solomon.model.gpt import GPT
from solomon.params import EvalParams
from solomon.records import CALIBRATION, TASKS, eval_line
from solomon.runtime import configure_torch

EVAL_SPLITS = ("val", "test")


@dataclass(frozen=True)
class TaskPaths:
    """Where the benchmark tasks read and write: the prepared corpus (the test split the built-in tasks are made
    from), their data directory, the repository root task files are relative to, and the replay sample's file."""

    corpus_dir: Path
    data_dir: Path
    root: Path
    requests: Path


def evaluate(
    params: EvalParams,
    model_dir: Path,
    tokens_dir: Path,
    tokenizer_path: Path,
    out: Path,
    reliability_dir: Path,
    tasks: TaskPaths | None = None,
) -> dict:
    """Write ``out`` (metrics.json: per split loss, perplexity, bits per byte, accuracy, ECE, MCE; under
    ``calibration`` the temperature and the test split's figures and bins with it; under ``tasks`` each benchmark
    task's scores and provenance), ``reliability_dir/<split>.json`` (the reliability diagram's bins) and the tasks'
    replay sample (none without ``tasks``: a model scored outside the pipeline); return the metrics."""
    configure_torch(params.threads)
    model = weights.load(model_dir)
    tokenizer = load_tokenizer(tokenizer_path)
    byte_lengths = token_byte_lengths(tokenizer)
    if len(byte_lengths) != model.config.vocab_size:
        raise SolomonError(
            f"tokenizer has {len(byte_lengths)} tokens but the model expects {model.config.vocab_size}: "
            "retrain with `dvc repro`"
        )
    val, test = EVAL_SPLITS
    val_tokens, test_tokens = open_tokens(tokens_dir, val), open_tokens(tokens_dir, test)
    val_scores, sample = SplitScores(byte_lengths), TemperatureSample(_targets(len(val_tokens), params.max_tokens))
    for logits, targets in predictions(model, val_tokens, params.batch_size, params.max_tokens):
        val_scores.add(logits, targets)
        sample.add(logits, targets)
    temperature, fit_tokens = sample.fit()
    test_scores, scaled = SplitScores(byte_lengths), SplitScores(byte_lengths)
    for logits, targets in predictions(model, test_tokens, params.batch_size, params.max_tokens):
        test_scores.add(logits, targets)
        scaled.add(logits / temperature, targets)
    (val_metrics, val_bins), (test_metrics, test_bins) = (
        s.result(params.calibration_bins) for s in (val_scores, test_scores)
    )
    metrics = {
        val: val_metrics,
        test: test_metrics,
        CALIBRATION: _calibrated(
            temperature, f"{val} ({fit_tokens} tokens)", test, *scaled.result(params.calibration_bins)
        ),
    }
    if tasks is not None:
        metrics[TASKS] = benchmark(params, model, tokenizer, read_meta(tokens_dir)["eod_id"], tasks)
    for split, bins in ((val, val_bins), (test, test_bins)):
        write_json(reliability_dir / f"{split}.json", bins)
    write_json(out, metrics)
    return metrics


def benchmark(params: EvalParams, model: GPT, tokenizer, eod_id: int, paths: TaskPaths) -> dict:
    """The built-in tasks' data made, then ``params.tasks`` scored: metrics.json's ``tasks`` section; each task's
    replay sample written to ``paths.requests``."""
    build_task_data(paths.corpus_dir, paths.data_dir)
    scores = score_tasks(params.tasks, paths.root, model, tokenizer, eod_id, params.batch_size)
    write_text(paths.requests, "".join(eval_line(request) for score in scores for request in score.replay))
    return {score.name: score.section for score in scores}


def _targets(n_tokens: int, max_tokens: int | None) -> int:
    """How many targets ``heldout.predictions`` yields of a split of ``n_tokens``."""
    return min(n_tokens - 1, max_tokens or n_tokens)


class SplitScores:
    """A split's held-out scores and reliability bins, from the same batches."""

    def __init__(self, byte_lengths: np.ndarray) -> None:
        self.score, self.bins = HeldOutScore(byte_lengths), ReliabilityBins()

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        self.score.add(logits, targets)
        self.bins.add(logits, targets)

    def result(self, n_bins: int) -> tuple[dict, list[dict]]:
        """(loss, perplexity, bits per byte, accuracy, tokens, bytes, ECE, MCE; the reliability bins)."""
        bins = self.bins.bins(n_bins)
        return self.score.result() | calibration_errors(bins), bins


def _calibrated(temperature: float, fitted_on: str, split: str, scored: dict, bins: list[dict]) -> dict:
    """metrics.json's ``calibration``: T, what it was fitted on, and ``split``'s figures and bins with the logits
    divided by it (flat keys: ``dvc metrics`` and MLflow show each as ``calibration.<split>_<name>``). Accuracy and
    the token counts are those of the raw split: dividing by T keeps every ranking."""
    return {
        "temperature": round(temperature, 4),
        "fitted_on": fitted_on,
        **{f"{split}_{name}": scored[name] for name in ("loss", "perplexity", "bits_per_byte", "ece", "mce")},
        f"{split}_reliability": bins,
    }
