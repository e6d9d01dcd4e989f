"""Evaluation during training, every ``train.eval_interval`` steps: the loss on a fixed validation subset (windows
spread over the whole val split, ``heldout.spread_windows``), which picks the best model (the recorder saves it as
the run's output) and drives early stopping, and sample generations from their own random stream."""

from __future__ import annotations

import numpy as np
import torch
from tokenizers import Tokenizer

from solomon.evaluation.heldout import evaluate_tokens
from solomon.model.gpt import GPT
from solomon.model.sampling import generate
from solomon.params import Params
from solomon.rng import sample_seed
from solomon.train.early_stopping import EarlyStopping


class PeriodicEvaluation:
    def __init__(
        self,
        params: Params,
        val_tokens: np.ndarray,
        tokenizer: Tokenizer,
        byte_lengths: np.ndarray,
        eod_id: int,
        stopper: EarlyStopping,
    ) -> None:
        self.params = params
        self.val_tokens = val_tokens
        self.tokenizer = tokenizer
        self.byte_lengths = byte_lengths
        self.eod_id = eod_id
        self.stopper = stopper

    def __call__(self, model: GPT, step: int) -> dict:
        """Evaluate ``model`` after ``step`` steps. Returns the evaluation log's record, whose "best" says whether
        it is the best model so far."""
        cfg = self.params.train
        model.eval()
        metrics = evaluate_tokens(
            model, self.val_tokens, self.byte_lengths, self.params.eval.batch_size, cfg.eval_tokens, spread=True
        )
        samples = [self._sample(model, step, index, prompt) for index, prompt in enumerate(cfg.samples.prompts)]
        model.train()
        improved = self.stopper.update(step, metrics["loss"])
        return {
            "step": step,
            "val_loss": metrics["loss"],
            "val_perplexity": metrics["perplexity"],
            "val_bits_per_byte": metrics["bits_per_byte"],
            "best": improved,
            "samples": samples,
        }

    def _sample(self, model: GPT, step: int, index: int, prompt: str) -> dict:
        samples = self.params.train.samples
        generator = torch.Generator().manual_seed(sample_seed(self.params.train.seed, step, index))
        new_ids = generate(
            model,
            self.tokenizer.encode(prompt).ids,
            samples.max_new_tokens,
            samples.temperature,
            samples.top_k,
            generator,
            stop_id=self.eod_id,
        )
        return {"prompt": prompt, "completion": self.tokenizer.decode(new_ids)}
