"""``solomon generate``: sample text from a run's model, only after its files verify against the run's manifest.

Every file it reads — the weights, model config and tokenizer (found as ``solomon verify`` finds them: workspace,
or DVC cache) and the run's ``hyperparameters.yaml`` — is checked against the manifest's SHA256 first and then
read from the very path verify hashed. Sampling settings default to the run's own ``train.samples``; the seed
makes a generation repeatable.
"""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from solomon import records
from solomon.audit.verify import verify
from solomon.data.tokenizer import load_tokenizer
from solomon.errors import SolomonError
from solomon.model import weights
from solomon.model.sampling import generate
from solomon.records import RunFiles
from solomon.runtime import configure_torch

# What generation reads: the serving files and the run's hyperparameters (sampling defaults, end-of-document token).
LOADED = (*records.SERVING_FILES, RunFiles.HYPERPARAMETERS)


def verified_files(run_dir: Path, root: Path) -> dict[str, Path]:
    """Where the files generation reads are, after checking them against the manifest; refuses on any problem."""
    result = verify(run_dir, root, set(LOADED))
    if result.problems:
        raise SolomonError(f"refusing to load {run_dir}: {result.problems[0]}; run `solomon verify {run_dir}`")
    return result.files


def generate_text(
    run_dir: Path,
    prompt: str,
    root: Path = Path("."),
    max_new_tokens: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    seed: int = 0,
    threads: int = 1,
) -> str:
    files = verified_files(run_dir, root)
    hyper = yaml.safe_load(files[RunFiles.HYPERPARAMETERS].read_text(encoding="utf-8"))
    samples = hyper["train"]["samples"]
    configure_torch(threads)
    model = weights.load_files(files[records.MODEL_CONFIG], files[records.WEIGHTS])
    tokenizer = load_tokenizer(files[records.TOKENIZER])
    prompt_ids = tokenizer.encode(prompt).ids
    if not prompt_ids:
        raise SolomonError("--prompt is empty: give some text to continue")
    new_ids = generate(
        model,
        prompt_ids,
        max_new_tokens or samples["max_new_tokens"],
        temperature or samples["temperature"],
        top_k if top_k is not None else samples["top_k"],
        torch.Generator().manual_seed(seed),
        stop_id=tokenizer.token_to_id(hyper["tokenizer"]["eod_token"]),
    )
    return prompt + tokenizer.decode(new_ids)
