"""Benchmark tasks scored by EleutherAI's lm-evaluation-harness (lm-eval) on the run's own model, in-process.

``SolomonLM`` is lm-eval's model interface over a ``GPT`` and its tokenizer, in fp32 as the evaluate stage scores.
Every scored sequence is at most ``block_size`` tokens (context and continuation, the context cut from the left),
and a rolling document is cut into windows of ``block_size - 1`` predicted tokens after one of context: the
sequences lm-eval's ``local-completions`` sends a server with ``max_length = block_size + 1`` and its ``hf`` model
feeds the Hugging Face export with ``max_length = block_size - 1``, so the three see the same tokens.

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

import torch
import yaml
from tokenizers import Tokenizer

from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.model.gpt import GPT

REPLAY_REQUESTS = 16  # requests per task kept for the replay against a server
BOOTSTRAP_ITERS = 1000  # lm-eval's bootstrap of the standard error of bits per byte and perplexities
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")  # datasets' builders that read local files only


@dataclass
class Scored:
    """One scored sequence: ``tokens`` (context then continuation), how many are context, and what the continuation
    earned: its summed log-probability (nats) and whether each of its tokens was the most likely."""

    tokens: list[int]
    context: int
    loglikelihood: float
    greedy: bool
    cut: bool = False  # the continuation did not fit the window: its first tokens were not scored


def _lm_class():
    from lm_eval.api.model import TemplateLM

    class SolomonLM(TemplateLM):
        def __init__(self, model: GPT, tokenizer: Tokenizer, eod_id: int, batch_size: int) -> None:
            super().__init__()
            self.model, self.tokenizer, self.eod_id, self.batch_size = model.eval(), tokenizer, eod_id, batch_size
            self.max_length = model.config.block_size
            self.scored: list[Scored] = []

        @property
        def eot_token_id(self) -> int:
            return self.eod_id

        def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
            return self.tokenizer.encode(string).ids

        def tok_decode(self, tokens: list[int], **kwargs) -> str:
            return self.tokenizer.decode(tokens)

        def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
            pairs = [(list(context), list(continuation)) for _, context, continuation in requests]
            return [(s.loglikelihood, s.greedy) for s in self.score(pairs)]

        @torch.no_grad()
        def score(self, pairs: list[tuple[list[int], list[int]]]) -> list[Scored]:
            """Each (context, continuation) cut to the last ``max_length`` tokens and scored, in batches of the
            longest first (right-padded: a causal model's earlier positions do not see the padding)."""
            sequences = [(context + continuation)[-self.max_length :] for context, continuation in pairs]
            results: list[Scored | None] = [None] * len(pairs)
            order = sorted(range(len(pairs)), key=lambda i: (-len(sequences[i]), i))
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                width = max(len(sequences[i]) - 1 for i in batch)
                inputs = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    inputs[row, : len(sequences[i]) - 1] = torch.tensor(sequences[i][:-1])
                logprobs = torch.log_softmax(self.model(inputs).float(), dim=-1)
                for row, i in enumerate(batch):
                    # a continuation longer than the window keeps its last tokens, after one of context at least
                    sequence = sequences[i]
                    n = min(len(pairs[i][1]), len(sequence) - 1)
                    rows = logprobs[row, len(sequence) - 1 - n : len(sequence) - 1]
                    targets = torch.tensor(sequence[-n:])
                    earned = rows.gather(1, targets[:, None])[:, 0]
                    greedy = bool((rows.argmax(dim=-1) == targets).all())
                    cut = n < len(pairs[i][1])
                    results[i] = Scored(sequence, len(sequence) - n, float(earned.sum()), greedy, cut)
            self.scored += results
            return results

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
            from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

            totals = []
            for (text,) in [request.args for request in requests]:
                windows = [
                    make_disjoint_window(window)
                    for window in get_rolling_token_windows(
                        self.tok_encode(text), self.prefix_token_id, self.max_length - 1, context_len=1
                    )
                ]
                totals.append(sum(s.loglikelihood for s in self.score(windows)))
            return totals

        @torch.no_grad()
        def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
            """Greedy continuations, cut at the first of the request's ``until`` strings."""
            answers = []
            for context, gen_kwargs in [request.args for request in requests]:
                until = gen_kwargs.get("until") or []
                until = [until] if isinstance(until, str) else list(until)
                ids, new = self.tok_encode(context), []
                for _ in range(int(gen_kwargs.get("max_gen_toks", 256))):
                    window = torch.tensor([(ids + new)[-self.max_length :]])
                    token = int(self.model(window)[0, -1].argmax())
                    if token == self.eod_id:
                        break
                    new.append(token)
                    text = self.tok_decode(new)
                    if any(stop in text for stop in until):
                        break
                text = self.tok_decode(new)
                cut = min((text.find(stop) for stop in until if stop in text), default=len(text))
                answers.append(text[:cut])
            return answers

    return SolomonLM


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
    configs = [task_config(spec, root) for spec in specs]
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    import datasets
    import huggingface_hub.constants

    # offline, whatever the environment says: a task reads local files only (task_config refused the rest)
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    datasets.disable_progress_bars()
    lm = _lm_class()(model, tokenizer, eod_id, batch_size)
    cwd, cache = Path.cwd(), datasets.config.HF_DATASETS_CACHE
    os.chdir(root)  # a task's data_files are relative to the repository root
    try:
        with tempfile.TemporaryDirectory(prefix="solomon-datasets-") as scratch:
            datasets.config.HF_DATASETS_CACHE = scratch  # each data file read anew; nothing left in ~/.cache
            return [_score(spec, path, config, root, lm) for spec, (path, config) in zip(specs, configs, strict=True)]
    finally:
        os.chdir(cwd)
        datasets.config.HF_DATASETS_CACHE = cache


def _score(spec: str, path: Path, config: dict, root: Path, lm) -> TaskScore:
    """One task run on its own, so that every request ``lm`` scores is this task's."""
    import lm_eval
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks import TaskManager

    lm.scored = []
    name = config["task"]
    result = simple_evaluate(
        model=lm, tasks=[name], task_manager=TaskManager(include_path=str(path.parent), include_defaults=False),
        bootstrap_iters=BOOTSTRAP_ITERS, log_samples=False,
        random_seed=0, numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=0,
    )  # fmt: skip
    section = {
        **_metrics(result["results"][name]),
        "n": int(result["n-samples"][name]["effective"]),
        # scored sequences whose continuation was longer than the model's context: only its last tokens were scored
        # (lm-eval's hf and local-completions models refuse such an item)
        "cut": sum(s.cut for s in lm.scored),
        "task_file": spec,
        "task_sha256": sha256_file(path),
        "data_sha256": {f: sha256_file(root / f) for f in data_files(config)},
        "lm_eval": lm_eval.__version__,
    }
    return TaskScore(name, section, replay_sample(name, lm.scored))


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
