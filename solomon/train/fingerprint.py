"""What a checkpoint belongs to: params, data, tokenizer, code and environment, flattened to named values.

Resume compares the checkpoint's fingerprint with the current one and names the first key that differs.
Params in ``RESUMABLE_PARAMS`` may change between an interruption and its resume: they do not alter the
batches or updates of the steps already taken.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from solomon.hashing import sha256_file
from solomon.imports import closure, relative_names
from solomon.params import Params, flatten

# The code a checkpoint depends on: every package module the training loop runs, derived from its imports.
LOOP = Path(__file__).with_name("loop.py")
# The params that change what training computes or records: these sections and keys (dvc.yaml's train stage
# lists the same; a test holds them equal) ...
TRAINING_PARAMS = ("model", "train", "lr", "eval.batch_size")  # eval.batch_size: the periodic evaluations' batches
# ... except those that may change between an interruption and its resume without changing the steps taken.
RESUMABLE_PARAMS = frozenset({"train.max_steps", "train.ckpt_interval", "train.keep_checkpoints"})


def fingerprint(params: Params, tokens_dir: Path, tokenizer_path: Path | None) -> dict:
    every = flatten(params.model_dump(mode="json"), "params")
    values = {
        key: value
        for key, value in every.items()
        if any(key == f"params.{name}" or key.startswith(f"params.{name}.") for name in TRAINING_PARAMS)
        and key.removeprefix("params.") not in RESUMABLE_PARAMS
    }
    values["data.train.bin"] = sha256_file(tokens_dir / "train.bin")
    values["data.val.bin"] = sha256_file(tokens_dir / "val.bin")
    if tokenizer_path is not None:
        values["tokenizer"] = sha256_file(tokenizer_path)
    for name, path in zip(relative_names(closure(LOOP)), closure(LOOP), strict=True):
        values[f"code.{name}"] = sha256_file(path)
    # Threads, precision and compile are params (train.*) and so already above.
    values["environment.torch"] = str(torch.__version__)
    values["environment.numpy"] = np.__version__  # the data order draws from numpy's generator
    values["environment.deterministic"] = torch.are_deterministic_algorithms_enabled()
    return values


def first_difference(saved: dict, current: dict) -> tuple[str, object, object] | None:
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            return key, saved.get(key), current.get(key)
    return None
