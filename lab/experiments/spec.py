"""``docs/experiments.yaml``, read and checked before anything trains, and the exact commands of a page's runs.

It holds ``base`` (params every run sets: small enough for 2 cores) and ``pages``: per page its ``runs`` (name →
params), ``charts`` and ``columns`` (metrics for the results table), and optionally ``params`` that all of the
page's runs hold (the recipe a page studies, where it is not the default's), ``queue`` (queue its runs), ``prefix``
(its experiments' names start with it; the page's name by default), ``scale`` (``docs``, the default: the base
applies; ``full``: it does not, so the runs train at params.yaml's own scale, an hour each) and ``made_under``
(defaults that have moved since the runs were made: today's commands set them to reproduce the runs, the commands
the runs were made with did not need them). Every command of a page
sets every key that any of its runs changes, so the commands do not depend on the order they run in, nor on what the
workspace held before.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from pydantic import ValidationError

from lab.scratch import merge
from solomon.errors import SolomonError
from solomon.params import Params, describe_error, flatten, read_yaml
from solomon.records import PARAMS_FILE
from solomon.report.charts import COMPARISONS
from solomon.train.hooks import crash_environment

SPEC = Path("docs/experiments.yaml")
RUN_OPTIONS = frozenset({"fresh", "kill_after_step", "then"})
# A page with `queue: true` queues its runs (`dvc exp run --queue`) and then runs the queue: each run in its own
# temporary copy of the commit, from step 1, independent of the others and of the workspace.
RUN_QUEUE = "dvc exp run --run-all"
SCALES = ("docs", "full")


def load_spec(path: Path = SPEC) -> dict:
    try:
        spec = read_yaml(path)
    except (OSError, yaml.YAMLError) as error:
        raise SolomonError(f"cannot read {path}: {error}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("base"), dict) or not isinstance(spec.get("pages"), dict):
        raise SolomonError(f"{path} needs a `base` mapping of params and a `pages` mapping (see docs/README.md)")
    params = read_params(path.parent.parent)
    for page, entry in spec["pages"].items():
        missing = [key for key in ("runs", "charts", "columns") if not isinstance(entry, dict) or key not in entry]
        if missing:
            raise SolomonError(f"{path}: page {page} has no `{missing[0]}`: give runs, charts and columns")
        for key, meaning in (("params", "the values all its runs hold"), ("made_under", "the defaults they ran at")):
            if not isinstance(entry.get(key, {}), dict):
                raise SolomonError(f"{path}: page {page}: `{key}` must map params to {meaning}")
        prefix = entry.get("prefix", page)
        if not isinstance(prefix, str) or not prefix:
            raise SolomonError(f"{path}: page {page}: `prefix` must be a non-empty name for its experiments")
        if entry.get("scale", "docs") not in SCALES:
            raise SolomonError(f"{path}: page {page}: `scale` must be docs (the base applies) or full (it does not)")
        if not isinstance(entry.get("queue", False), bool):
            raise SolomonError(f"{path}: page {page}: `queue` must be true or false")
        unknown = [chart for chart in entry["charts"] if chart not in COMPARISONS]
        if unknown:
            raise SolomonError(f"{path}: page {page}: unknown chart {unknown[0]!r}; use {', '.join(COMPARISONS)}")
        for run, value in entry["runs"].items():
            overrides, options = run_entry(value)
            unknown_options = set(options) - (set() if entry.get("queue") else RUN_OPTIONS)
            if unknown_options:
                raise SolomonError(
                    f"{path}: page {page}, run {run}: unknown option {sorted(unknown_options)[0]!r}; "
                    f"use {', '.join(sorted(RUN_OPTIONS))} (none on a `queue: true` page: its runs start fresh)"
                )
            try:  # every run's params must be valid before anything trains
                Params.model_validate(merge(params, nest(fixed_settings(spec, page) | overrides)))
            except ValidationError as error:
                raise SolomonError(f"{path}: page {page}, run {run}: {describe_error(error)}") from None
    names = [experiment_name(spec, page, run) for page, entry in spec["pages"].items() for run in entry["runs"]]
    if duplicate := next((name for name in names if names.count(name) > 1), None):
        raise SolomonError(f"{path}: two runs are the experiment {duplicate}: rename one run or give a page a `prefix`")
    return spec


def nest(flat: dict) -> dict:
    """Dotted keys as nested sections, the inverse of ``flatten``: {"lr.warmup": 100} → {"lr": {"warmup": 100}}."""
    nested: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _setting(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def run_entry(value: dict) -> tuple[dict, dict]:
    """(params, options) of a run: a plain mapping is its params; ``{params: …, fresh: …, kill_after_step: …}``
    adds options."""
    if "params" in value:
        return value["params"], {k: v for k, v in value.items() if k != "params"}
    return value, {}


def commands(spec: dict, page: str, defaults: dict, as_made: bool = False) -> dict[str, list[str]]:
    """{run: its exact shell command lines, the last one making its results; any before it kill their training}.
    ``defaults`` are the flattened params.yaml values: a key another run of the page changes is set to its default
    explicitly.

    Options: ``fresh`` removes the resumable training state first (`checkpoints/`), so the run starts at step 1;
    ``kill_after_step: N`` first runs the same experiment with the training process SIGKILLing itself after step
    N (the train stage's crash hook, ``solomon.train.hooks``), then runs it again, which resumes. ``as_made``: the
    lines as the runs were made, without the page's ``made_under``."""
    result = {}
    for run, settings in run_settings(spec, page, defaults, as_made).items():
        options = run_entry(spec["pages"][page]["runs"][run])[1]
        flags = " ".join(f"-S {shlex.quote(f'{key}={_setting(value)}')}" for key, value in settings.items())
        fresh = "rm -rf checkpoints && " if options.get("fresh") else ""
        queue = "--queue " if queued(spec, page) else ""
        lines = [f"dvc exp run {queue}-n {experiment_name(spec, page, run)} {flags}"]
        if "kill_after_step" in options:
            crash = crash_environment("after-step", int(options["kill_after_step"]))
            variables = " ".join(f"{name}={shlex.quote(value)}" for name, value in crash.items())
            lines.insert(0, f"{variables} dvc exp run -n {experiment_name(spec, page, run)}-killed {flags}")
        lines[0] = fresh + lines[0]
        result[run] = lines
    return result


def experiment_name(spec: dict, page: str, run: str) -> str:
    """A run's DVC experiment name: ``<prefix>-<run>``, the prefix the page's own name unless it sets ``prefix``
    (a page renamed after its runs were made keeps the names they were made under)."""
    return f"{spec['pages'][page].get('prefix', page)}-{run}"


def fixed_settings(spec: dict, page: str, as_made: bool = False) -> dict:
    """The flat params every run of a page sets whatever it varies: the base (unless the page is at full scale), the
    page's own ``params``, then (unless ``as_made``) the defaults it was ``made_under``."""
    entry = spec["pages"][page]
    base = spec["base"] if entry.get("scale", "docs") == "docs" else {}
    return base | entry.get("params", {}) | ({} if as_made else entry.get("made_under", {}))


def run_settings(spec: dict, page: str, defaults: dict, as_made: bool = False) -> dict[str, dict]:
    """{run: the flat params its command sets}: the fixed ones, and every key any run of the page changes — in a
    run that does not change it, at the page's fixed value if it has one, else at the default the runs were made
    under (a varied key's command always set it, so its moved default was in the command as made) or today's."""
    entry = spec["pages"][page]
    runs = {run: run_entry(value)[0] for run, value in entry["runs"].items()}
    varied = sorted({key for overrides in runs.values() for key in overrides})
    fixed = fixed_settings(spec, page, as_made)
    then = {key: defaults[f"params.{key}"] for key in varied} | entry.get("made_under", {})
    return {
        run: fixed | {key: overrides.get(key, fixed.get(key, then[key])) for key in varied}
        for run, overrides in runs.items()
    }


def queued(spec: dict, page: str) -> bool:
    return bool(spec["pages"][page].get("queue", False))


def all_commands(spec: dict, page: str, defaults: dict) -> list[str]:
    """The page's command lines in the order they run: a queued page's queue lines, then the line that runs it."""
    lines = [line for run_lines in commands(spec, page, defaults).values() for line in run_lines]
    return [*lines, RUN_QUEUE] if queued(spec, page) else lines


def read_params(repo: Path) -> dict:
    """The repository's params.yaml, nested, read as DVC reads it (YAML 1.2 numbers)."""
    return read_yaml(repo / PARAMS_FILE)


def default_values(repo: Path) -> dict:
    return flatten(read_params(repo), "params")
