"""Benchmark tasks scored by EleutherAI's lm-evaluation-harness (lm-eval) on the run's own model, in-process
(``solomon.evaluation.lm``), offline: task files read and refused in one line when they need the hub.

``score_tasks`` runs each task on its own and returns, per task, its metrics and its provenance (the task file's
and data files' SHA256, lm-eval's version), and a deterministic sample of its requests: the token ids scored and
the log-likelihood they earned, which ``solomon score`` replays against a live server.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from tokenizers import Tokenizer

from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.model.gpt import GPT

if TYPE_CHECKING:
    from solomon.evaluation.lm import Scored

REPLAY_REQUESTS = 16  # requests per task kept for the replay against a server
# lm-eval's bootstrap of a standard error that has no closed form (acc's has one); at 0 it gives none at all
BOOTSTRAP_ITERS = 1000
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")  # datasets' builders that read local files only


@dataclass
class TaskScore:
    """What ``score_tasks`` returns for one task: its metrics.json section and its replay sample."""

    name: str
    section: dict
    replay: list[dict] = field(default_factory=list)


def task_config(spec: str, root: Path, made: tuple[str, ...] = ()) -> tuple[Path, dict]:
    """A task file named by ``eval.tasks`` (a YAML path relative to ``root``) and its configuration, refused in one
    line when it reads a dataset from the Hugging Face hub or a data file that is not there (unless it is one of
    ``made``: the pipeline makes it later)."""
    path = root / spec
    if not path.is_file():
        raise SolomonError(
            f"eval.tasks: {spec} is not a task file under {root}; name a task YAML there (docs/scores.md: your own "
            "task with local data files)"
        )
    try:
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=_IgnoreTags) or {}
    except yaml.YAMLError as exc:
        raise SolomonError(f"eval.tasks: {spec} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(config, dict) or not isinstance(config.get("task"), str):
        raise SolomonError(f"eval.tasks: {spec} names no task (a top-level `task: <name>`)")
    source = config.get("dataset_path")
    if source not in LOCAL_BUILDERS:
        raise SolomonError(
            f"eval.tasks: {spec} reads the dataset {source!r} from the Hugging Face hub, which the pipeline never "
            f"reaches: copy its rows into a local file and set dataset_path to one of {', '.join(LOCAL_BUILDERS)} "
            "with dataset_kwargs.data_files naming it (docs/scores.md)"
        )
    for data_file in data_files(config):
        if data_file not in made and not (root / data_file).is_file():
            raise SolomonError(f"eval.tasks: {spec} reads {data_file}, which is not there: make it, or fix the path")
    return path, config


def task_configs(specs: list[str], root: Path, made: tuple[str, ...] = ()) -> list[tuple[Path, dict]]:
    """``task_config`` of each of ``specs``, refused in one line when two name the same task."""
    configs = [task_config(spec, root, made) for spec in specs]
    names = [config["task"] for _, config in configs]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise SolomonError(f"eval.tasks: two task files name the task {twice!r}; give each task once")
    return configs


def data_files(config: dict) -> list[str]:
    """The local files a task configuration reads (``dataset_kwargs.data_files``: a path, a list or a mapping)."""
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, str):
        return [files]
    if isinstance(files, dict):
        return [f for value in files.values() for f in ([value] if isinstance(value, str) else value)]
    return list(files or [])


class _IgnoreTags(yaml.SafeLoader):
    """lm-eval's task files may hold ``!function`` tags; reading the dataset source needs none of them."""


_IgnoreTags.add_multi_constructor("!", lambda loader, suffix, node: None)


def score_tasks(
    specs: list[str], root: Path, model: GPT, tokenizer: Tokenizer, eod_id: int, batch_size: int
) -> list[TaskScore]:
    """Each task of ``specs`` (task YAML paths relative to ``root``) scored on ``model`` by lm-eval, offline."""
    configs = task_configs(specs, root)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    import datasets
    import huggingface_hub.constants

    # offline, whatever the environment says: a task reads local files only (task_config refused the rest)
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    datasets.disable_progress_bars()
    from solomon.evaluation.lm import SolomonLM  # lm-eval's import (datasets, …) only when a task is scored

    lm = SolomonLM(model, tokenizer, eod_id, batch_size)
    cwd, cache = Path.cwd(), datasets.config.HF_DATASETS_CACHE
    os.chdir(root)  # a task's data_files are relative to the repository root
    try:
        with tempfile.TemporaryDirectory(prefix="solomon-datasets-") as scratch:
            datasets.config.HF_DATASETS_CACHE = scratch  # each data file read anew; nothing left in ~/.cache
            results = _evaluate(
                lm, [config["task"] for _, config in configs], sorted({str(p.parent) for p, _ in configs})
            )
    finally:
        os.chdir(cwd)
        datasets.config.HF_DATASETS_CACHE = cache
    return [
        _task_score(spec, path, config, root, results, lm.scored)
        for spec, (path, config) in zip(specs, configs, strict=True)
    ]


def _evaluate(lm, names: list[str], folders: list[str]) -> dict:
    """lm-eval's run of the tasks ``names`` (their files in ``folders``) on ``lm``, zero-shot unless a task file
    says otherwise, seeded as lm-eval's ``simple_evaluate`` seeds (its environment report, a subprocess, left out)."""
    import random

    import numpy as np
    import torch
    from lm_eval.evaluator import evaluate
    from lm_eval.tasks import TaskManager

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    loaded = TaskManager(include_path=folders, include_defaults=False).load(names)
    for task in loaded["tasks"].values():
        if task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=0)
    return evaluate(lm=lm, task_dict=loaded, bootstrap_iters=BOOTSTRAP_ITERS, log_samples=False)


def _task_score(spec: str, path: Path, config: dict, root: Path, results: dict, scored: list[Scored]) -> TaskScore:
    """One task's metrics.json section and replay sample."""
    import lm_eval

    name = config["task"]
    mine = [s for s in scored if s.task == name]
    section = {
        **_metrics(results["results"][name]),
        "n": int(results["n-samples"][name]["effective"]),
        # scored sequences whose continuation was longer than the model's context: only its last tokens were scored
        # (lm-eval's hf and local-completions models refuse such an item)
        "cut": sum(s.cut for s in mine),
        "task_file": spec,
        "task_sha256": sha256_file(path),
        "data_sha256": {f: sha256_file(root / f) for f in data_files(config)},
        "lm_eval": lm_eval.__version__,
    }
    return TaskScore(name, section, replay_sample(name, mine))


def _metrics(results: dict) -> dict:
    """lm-eval's "<metric>,<filter>" keys as {metric: value, <metric>_stderr: value}, rounded as metrics.json is;
    a standard error lm-eval does not give (bits per byte, perplexities: "N/A") is left out."""
    metrics = {}
    for key, value in results.items():
        if "," not in key or not isinstance(value, int | float):
            continue
        metric, _ = key.split(",", 1)
        metrics[metric] = None if math.isnan(value) else round(float(value), 6)
    return metrics


def replay_sample(task: str, scored: list[Scored], size: int = REPLAY_REQUESTS) -> list[dict]:
    """``size`` of a task's scored sequences, chosen by the SHA256 of their tokens: the same for the same task."""

    def key(item: Scored) -> str:
        return hashlib.sha256(f"{task}:{item.tokens}:{item.context}".encode()).hexdigest()

    unique = {key(s): s for s in scored}
    chosen = [unique[k] for k in sorted(unique)[:size]]
    return [
        {"task": task, "tokens": s.tokens, "context": s.context, "loglikelihood": s.loglikelihood, "greedy": s.greedy}
        for s in chosen
    ]
