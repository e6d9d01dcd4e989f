"""The experiments behind ``docs/``: each page's runs as exact ``dvc exp run`` commands, run in a scratch copy of
the pipeline (the default corpus), their results checked in as data beside the page, and the page's commands,
tables and figures rebuilt from that data alone — so a page can be redrawn without retraining, and cannot show
numbers its commands did not produce.

``docs/experiments.yaml`` holds ``base`` (params every run sets: small enough for 2 cores) and ``pages``: per page
its ``runs`` (name → params), ``charts`` and ``columns`` (metrics for the results table), and optionally ``params``
that all of the page's runs hold (the recipe a page studies, where it is not the default's). Every command of a page
sets every key that any of its runs changes, so the commands do not depend on the order they run in, nor on what
the workspace held before.

Data of a page: ``docs/<page>/data/<run>/`` (the run's records under their run-directory names: metrics.json,
train_metrics.json, train_run.json, train_log.tsv, train_evals.jsonl, reliability_{val,test}.json, the params.yaml
it ran with; and measured.json: command, wall seconds, peak RSS) and ``docs/<page>/data/exp_show.md`` with the
command that printed it (exp_show.command). Data made before train_run.json existed has none: its
train_metrics.json held both, and is read as both.
"""

from __future__ import annotations

import html
import json
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib
import yaml
from pydantic import ValidationError
from tabulate import tabulate

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from solomon.atomic import staged_dir, write_json, write_text
from solomon.errors import SolomonError, last_line
from solomon.hashing import sha256_file
from solomon.params import Params, describe_error, flatten
from solomon.records import (
    PARAMS_FILE,
    RECORD_FILES,
    WEIGHTS,
    RunFiles,
    read_evals,
    read_json,
    read_reliability,
    read_steps,
)
from solomon.tools.scratch import make_scratch_repo, merge, pipeline_env
from solomon.train.hooks import CRASH_AT

SPEC = Path("docs/experiments.yaml")
RUN_OPTIONS = frozenset({"fresh", "kill_after_step", "then"})
# A page with `queue: true` queues its runs (`dvc exp run --queue`) and then runs the queue: each run in its own
# temporary copy of the commit, from step 1, independent of the others and of the workspace.
RUN_QUEUE = "dvc exp run --run-all"
THEN_LOG = "then.log"
MEASURED = "measured.json"  # a run's command, wall seconds, peak RSS (and model SHA256)
EXP_SHOW_TABLE, EXP_SHOW_COMMAND = "exp_show.md", "exp_show.command"  # the table, and the command that printed it
CHARTS = ("loss", "lr", "reliability")
# The files of a run the page is drawn from: workspace path → name in the run's data directory (as in a run
# directory). All of the run's records but the data card, which is the same for every run of a page.
# And the params.yaml it ran with (as DVC wrote it for the run), so that a page whose runs no longer follow from the
# current params.yaml is caught (`stale_runs`), not silently shown.
RESULT_FILES = dict(files for name, files in RECORD_FILES.items() if name not in ("datacard_md", "datacard_json"))
RESULT_FILES[PARAMS_FILE] = RunFiles.PARAMS
# `dvc exp show` for review (`make exps`, the docs' tables): the params that differ and the results (metrics.json,
# train_metrics.json), nothing else. --drop (a regex each column name must not start with) takes DVC's bookkeeping
# columns and every dependency's hash: a path with a "/", a .json/.lock/.py file, or a bare output directory; with a
# baseline commit that has no dvc.lock (`make run` commits nothing) every hash would count as changed.
EXP_SHOW = [
    "dvc",
    "exp",
    "show",
    "--md",
    "--only-changed",
    "--drop",
    r"Created$|State$|Executor$|.*/|.*\.(json|lock|py)$|(models|anchors|corpus)$",
]
# Run `command` and report the largest resident set of any process it started (the train stage, in practice).
_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "start = time.monotonic()\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
    "print(json.dumps({'returncode': code, 'wall_s': round(time.monotonic() - start, 1),"
    " 'peak_rss_mib': round(peak, 1)}), file=sys.stderr)\n"
)


def load_spec(path: Path = SPEC) -> dict:
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise SolomonError(f"cannot read {path}: {error}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("base"), dict) or not isinstance(spec.get("pages"), dict):
        raise SolomonError(f"{path} needs a `base` mapping of params and a `pages` mapping (see docs/README.md)")
    params = yaml.safe_load((path.parent.parent / PARAMS_FILE).read_text(encoding="utf-8"))
    for page, entry in spec["pages"].items():
        missing = [key for key in ("runs", "charts", "columns") if not isinstance(entry, dict) or key not in entry]
        if missing:
            raise SolomonError(f"{path}: page {page} has no `{missing[0]}`: give runs, charts and columns")
        if not isinstance(entry.get("params", {}), dict):
            raise SolomonError(f"{path}: page {page}: `params` must map params to the values all its runs hold")
        if not isinstance(entry.get("queue", False), bool):
            raise SolomonError(f"{path}: page {page}: `queue` must be true or false")
        unknown = [chart for chart in entry["charts"] if chart not in CHARTS]
        if unknown:
            raise SolomonError(f"{path}: page {page}: unknown chart {unknown[0]!r}; use {', '.join(CHARTS)}")
        for run, value in entry["runs"].items():
            overrides, options = run_entry(value)
            unknown_options = set(options) - (set() if entry.get("queue") else RUN_OPTIONS)
            if unknown_options:
                raise SolomonError(
                    f"{path}: page {page}, run {run}: unknown option {sorted(unknown_options)[0]!r}; "
                    f"use {', '.join(sorted(RUN_OPTIONS))} (none on a `queue: true` page: its runs start fresh)"
                )
            try:  # every run's params must be valid before anything trains
                Params.model_validate(merge(params, _nest(fixed_settings(spec, page) | overrides)))
            except ValidationError as error:
                raise SolomonError(f"{path}: page {page}, run {run}: {describe_error(error)}") from None
    return spec


def _nest(flat: dict) -> dict:
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


def commands(spec: dict, page: str, defaults: dict) -> dict[str, list[str]]:
    """{run: its exact shell command lines, the last one making its results}. ``defaults`` are the flattened
    params.yaml values: a key another run of the page changes is set to its default explicitly.

    Options: ``fresh`` removes the resumable training state first (`checkpoints/`), so the run starts at step 1;
    ``kill_after_step: N`` first runs the same experiment with the training process SIGKILLing itself after step
    N (the train stage's crash hook, ``solomon.train.hooks``), then runs it again, which resumes."""
    result = {}
    for run, settings in run_settings(spec, page, defaults).items():
        options = run_entry(spec["pages"][page]["runs"][run])[1]
        flags = " ".join(f"-S {shlex.quote(f'{key}={_setting(value)}')}" for key, value in settings.items())
        fresh = "rm -rf checkpoints && " if options.get("fresh") else ""
        queue = "--queue " if queued(spec, page) else ""
        lines = [f"dvc exp run {queue}-n {page}-{run} {flags}"]
        if "kill_after_step" in options:
            step = int(options["kill_after_step"])
            lines.insert(0, f"{CRASH_AT}=after-step:{step} dvc exp run -n {page}-{run}-killed {flags}")
        lines[0] = fresh + lines[0]
        result[run] = lines
    return result


def fixed_settings(spec: dict, page: str) -> dict:
    """The flat params every run of a page sets whatever it varies: the base, then the page's own ``params``."""
    return spec["base"] | spec["pages"][page].get("params", {})


def run_settings(spec: dict, page: str, defaults: dict) -> dict[str, dict]:
    """{run: the flat params its command sets}: the fixed ones, and every key any run of the page changes."""
    runs = {run: run_entry(value)[0] for run, value in spec["pages"][page]["runs"].items()}
    varied = sorted({key for overrides in runs.values() for key in overrides})
    fixed = fixed_settings(spec, page)
    return {
        run: fixed | {key: overrides.get(key, defaults[f"params.{key}"]) for key in varied}
        for run, overrides in runs.items()
    }


def stale_runs(spec: dict, page: str, docs_dir: Path, params: dict) -> list[str]:
    """One line per run of the page whose recorded params.yaml is not what its command gives on ``params`` (the
    current params.yaml, nested) — its numbers are from another recipe — naming the first differing keys."""
    stale = []
    for run, settings in run_settings(spec, page, flatten(params, "params")).items():
        recorded_path = docs_dir / page / "data" / run / RunFiles.PARAMS
        if not recorded_path.is_file():
            stale.append(f"{page}/{run}: no record of the params it ran with (made before the runner kept them)")
            continue
        recorded = flatten(yaml.safe_load(recorded_path.read_text(encoding="utf-8")), "")
        expected = flatten(merge(params, _nest(settings)), "")
        differing = [
            f"{key} ran {recorded.get(key, '(unset)')!r}, now {expected.get(key, '(unset)')!r}"
            for key in sorted(recorded.keys() | expected.keys())
            if recorded.get(key) != expected.get(key)
        ]
        if differing:
            stale.append(f"{page}/{run}: " + "; ".join(differing[:3]) + ("; …" if len(differing) > 3 else ""))
    return stale


def queued(spec: dict, page: str) -> bool:
    return bool(spec["pages"][page].get("queue", False))


def all_commands(spec: dict, page: str, defaults: dict) -> list[str]:
    """The page's command lines in the order they run: a queued page's queue lines, then the line that runs it."""
    lines = [line for run_lines in commands(spec, page, defaults).values() for line in run_lines]
    return [*lines, RUN_QUEUE] if queued(spec, page) else lines


def read_params(repo: Path) -> dict:
    return yaml.safe_load((repo / PARAMS_FILE).read_text(encoding="utf-8"))


def default_values(repo: Path) -> dict:
    return flatten(read_params(repo), "params")


def run_page(spec: dict, page: str, source: Path, scratch: Path, data_dir: Path) -> dict[str, dict]:
    """Run a page's commands in a scratch copy of ``source``; replace ``data_dir`` with their results."""
    repo = make_scratch_repo(source, scratch, {})
    # The data stages first, once, so that each run's wall time is its own training, evaluation and report.
    subprocess.run(["dvc", "repro", "datacard"], cwd=repo, env=pipeline_env(), capture_output=True, check=True)
    if queued(spec, page):
        return _run_queued_page(spec, page, source, repo, data_dir)
    measured = {}
    with staged_dir(data_dir) as tmp:
        for run, lines in commands(spec, page, default_values(source)).items():
            before = [_measured_run(line, repo) for line in lines]
            measured[run] = before.pop() | {"model_sha256": sha256_file(repo / WEIGHTS)}
            if before:
                measured[run]["before"] = before
            out = _keep_results(repo, tmp / run)
            write_json(out / MEASURED, measured[run])
            then = run_entry(spec["pages"][page]["runs"][run])[1].get("then", [])
            if then:
                write_text(out / THEN_LOG, _run_then(then, repo))
        _write_exp_show(repo, tmp)
    return measured


def _measured_run(line: str, repo: Path) -> dict:
    """Run one command line under the measuring wrapper: {command, returncode, wall_s, peak_rss_mib}. A line that
    kills its own training (the crash hook) must fail, every other must succeed."""
    print(f"experiments: {line}", flush=True)
    wrapped = [sys.executable, "-c", _MEASURE, "bash", "-c", line]
    done = subprocess.run(wrapped, cwd=repo, env=pipeline_env(), capture_output=True, text=True)
    *output, report = done.stderr.strip().splitlines()  # the measuring wrapper's JSON comes last
    figures = {"command": line, **json.loads(report)}
    killed = f"{CRASH_AT}=" in line
    if (figures["returncode"] != 0) != killed:
        raise SolomonError(f"`{line}` exited {figures['returncode']}: {last_line(chr(10).join(output))}")
    return figures


def _keep_results(repo: Path, out: Path) -> Path:
    """Copy a run's result files from the workspace ``repo`` into ``out`` under their run-directory names."""
    out.mkdir()
    for path, name in RESULT_FILES.items():
        shutil.copyfile(repo / path, out / name)
    return out


def _run_queued_page(spec: dict, page: str, source: Path, repo: Path, data_dir: Path) -> dict[str, dict]:
    """Queue the page's runs, run the queue, then take each run's results from its experiment
    (`dvc exp apply`). A run's wall time and tokens/s are its training's (train_run.json): the queue runs them
    one after another in one command, in DVC's detached workers, so no peak RSS is measured per run."""
    # The queue runs each experiment from the commit: commit the data stages' lock so that they restore, not rerun.
    for args in (["git", "add", "-A"], ["git", "commit", "-q", "-m", "data stages"]):
        subprocess.run(args, cwd=repo, env=pipeline_env(), capture_output=True, check=True)
    measured = {}
    with staged_dir(data_dir) as tmp:
        runs = commands(spec, page, default_values(source))
        queue = {run: _measured_run(lines[0], repo) for run, lines in runs.items()}
        whole = _measured_run(RUN_QUEUE, repo)
        for run, queued_line in queue.items():
            subprocess.run(
                ["dvc", "exp", "apply", f"{page}-{run}"], cwd=repo, env=pipeline_env(), capture_output=True, check=True
            )
            out = _keep_results(repo, tmp / run)
            train_run = read_json(out / RunFiles.TRAIN_RUN)
            measured[run] = {
                "command": queued_line["command"],
                "returncode": whole["returncode"],
                "wall_s": train_run["wall_s"],  # its training (the queue's own command ran them all)
                "model_sha256": sha256_file(repo / WEIGHTS),
                "queue": {key: value for key, value in whole.items() if key != "peak_rss_mib"},
            }
            write_json(out / MEASURED, measured[run])
        _write_exp_show(repo, tmp)
    return measured


def _write_exp_show(repo: Path, data_dir: Path) -> None:
    """`dvc exp show` after a page's runs, and the command that printed it (EXP_SHOW may change later)."""
    table = subprocess.run(EXP_SHOW, cwd=repo, env=pipeline_env(), capture_output=True, text=True, check=True)
    write_text(data_dir / EXP_SHOW_TABLE, table.stdout)
    write_text(data_dir / EXP_SHOW_COMMAND, shlex.join(EXP_SHOW) + "\n")


def _run_then(lines: list[str], repo: Path) -> str:
    """Run the checks that follow a run (``then``), each in bash; return the transcript: each command after a
    ``$``, then its output (stdout and stderr as they came). A failing check fails the page."""
    transcript = []
    for line in lines:
        print(f"experiments: {line}", flush=True)
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=repo,
            env=pipeline_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if done.returncode != 0:
            raise SolomonError(f"`{line}` exited {done.returncode}: {last_line(done.stdout)}")
        transcript += [f"$ {line}", done.stdout.rstrip()]
    return "\n".join(transcript) + "\n"


def read_results(data_dir: Path, runs: list[str]) -> dict[str, dict]:
    """{run: {metrics, train_metrics, train_run, measured, steps, evals, reliability}} from a page's data
    directory."""
    results = {}
    for run in runs:
        folder = data_dir / run
        if not folder.is_dir():
            raise SolomonError(f"no results for run {run} in {data_dir}: run `solomon docs run {data_dir.parent.name}`")
        results[run] = {
            "metrics": read_json(folder / RunFiles.METRICS),
            "train_metrics": read_json(folder / RunFiles.TRAIN_METRICS),
            "train_run": read_json(folder / RunFiles.TRAIN_RUN)
            if (folder / RunFiles.TRAIN_RUN).is_file()
            else read_json(folder / RunFiles.TRAIN_METRICS),  # the combined file of older data
            "measured": read_json(folder / MEASURED),
            "steps": read_steps(folder / RunFiles.STEP_LOG),
            "evals": read_evals(folder / RunFiles.EVAL_LOG),
            "reliability": read_reliability(folder),
        }
    return results


def _lookup(result: dict, path: str):
    value = result
    for part in path.split("."):
        value = value[part]
    return value


def results_table(spec: dict, page: str, results: dict[str, dict]) -> str:
    columns = spec["pages"][page]["columns"]
    rows = [[run, *(_lookup(result, path) for path in columns.values())] for run, result in results.items()]
    return tabulate(rows, ["run", *columns], tablefmt="github")


def _moving_average(values: list[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each point (fewer at the start): the step loss is noisy."""
    sums, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        sums.append(total / min(i + 1, window))
    return sums


def _chart(kind: str, results: dict[str, dict]):
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    smoothed = {run: _moving_average([row["loss"] for row in result["steps"]], 20) for run, result in results.items()}
    for index, (run, result) in enumerate(results.items()):
        color = f"C{index}"
        steps = [row["step"] for row in result["steps"]]
        if kind == "loss":
            ax.plot(steps, smoothed[run], color=color, linewidth=1, label=f"{run}: train (mean of 20 steps)")
            evals = result["evals"]
            ax.plot(
                [e["step"] for e in evals],
                [e["val_loss"] for e in evals],
                "o--",
                color=color,
                markersize=3,
                linewidth=0.8,
                label=f"{run}: validation subset",
            )
            ax.set_ylabel("loss (nats/token)")
        elif kind == "lr":
            ax.plot(steps, [row["lr"] for row in result["steps"]], color=color, label=run)
            ax.set_ylabel("learning rate")
        else:  # reliability
            bins = result["reliability"]["val"]
            ece = result["metrics"]["val"]["ece"]
            ax.plot(
                [b["confidence"] for b in bins],
                [b["accuracy"] for b in bins],
                "o-",
                color=color,
                markersize=3,
                label=f"{run} (val ECE {ece:.4f})",
            )
    if kind == "loss":  # from just under the lowest loss to above the first evaluation: not the first steps
        # (with label smoothing the training loss includes the smoothing term, so it can sit above validation's)
        lowest = min(
            min(min(losses) for losses in smoothed.values()),
            min(e["val_loss"] for res in results.values() for e in res["evals"]),
        )
        highest = max(e["val_loss"] for res in results.values() for e in res["evals"])
        ax.set_ylim(lowest - 0.1, highest + 0.2)
    if kind == "reliability":
        ax.plot([0, 1], [0, 1], "--", color="grey", linewidth=1, label="calibrated")
        ax.set_xlabel("mean top-1 confidence in the bin (val, equal-mass bins)")
        ax.set_ylabel("accuracy in the bin")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    else:
        ax.set_xlabel("step")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _then_blocks(spec: dict, page: str, data_dir: Path) -> list[str]:
    """Each run's follow-up checks and what they printed, as recorded in its ``then.log``."""
    blocks = []
    for run, value in spec["pages"][page]["runs"].items():
        if run_entry(value)[1].get("then"):
            transcript = (data_dir / run / THEN_LOG).read_text(encoding="utf-8").rstrip()
            blocks += [f"Then, in the same workspace (run `{run}`), each command and its output:", "", "```text"]
            blocks += [transcript, "```", ""]
    return blocks


INTRO = [
    "From a clean checkout, in the repository root (each command sets every parameter its page varies, so the",
    "runs can go in any order, a run's own lines in the order shown; `dvc exp show` then lists them):",
]
QUEUE_INTRO = [
    "From a clean checkout, in the repository root: queue the runs (each sets every parameter the page varies), then",
    "run the queue, each run from step 1 in its own temporary copy of the commit; `dvc exp show` then lists them:",
]
BLOCK = "<!-- generated by `solomon docs render` from docs/experiments.yaml and {data}: do not edit -->"
START, END = "<!-- experiments:start -->", "<!-- experiments:end -->"


def _stale_notice(page: str, stale: list[str]) -> list[str]:
    """The page says so itself when its results are not what its commands give on today's params.yaml."""
    if not stale:
        return []
    head = (
        "**These results may not be what the commands below give today**: runs whose params differ from what the"
        " commands give on today's params.yaml, or were not recorded. `solomon docs run"
        f" {page}` reruns them."
    )
    return [
        *textwrap.wrap(head, 116, initial_indent="> ", subsequent_indent="> "),
        *(
            line
            for stale_line in stale
            for line in textwrap.wrap(stale_line, 116, initial_indent="> - ", subsequent_indent=">   ")
        ),
        "",
    ]


def render_page(spec: dict, page: str, docs_dir: Path, params: dict) -> Path:
    """Rewrite the generated block of ``docs/<page>.md`` and its charts from the page's data alone; ``params`` is
    today's params.yaml (nested), which sets the commands' other values and says whether the results are stale."""
    defaults = flatten(params, "params")
    entry = spec["pages"][page]
    data_dir = docs_dir / page / "data"
    results = read_results(data_dir, list(entry["runs"]))
    names = []
    for kind in entry["charts"]:
        fig = _chart(kind, results)
        fig.savefig(docs_dir / page / f"{kind}.png", metadata={"Software": None})
        plt.close(fig)
        names.append(kind)
    lines = [
        BLOCK.format(data=f"docs/{page}/data/"),
        "",
        *_stale_notice(page, stale_runs(spec, page, docs_dir, params)),
        *(QUEUE_INTRO if queued(spec, page) else INTRO),
        "",
        "```sh",
        *all_commands(spec, page, defaults),
        "```",
        "",
        results_table(spec, page, results),
        "",
        *(f"![{kind}]({page}/{kind}.png)\n" for kind in names),
        *_then_blocks(spec, page, data_dir),
        "<details><summary>The full table: <code>"
        + html.escape((data_dir / EXP_SHOW_COMMAND).read_text(encoding="utf-8").strip(), quote=False)
        + "</code> after those runs</summary>",
        "",
        (data_dir / EXP_SHOW_TABLE).read_text(encoding="utf-8").strip(),
        "",
        "</details>",
    ]
    page_path = docs_dir / f"{page}.md"
    text = page_path.read_text(encoding="utf-8")
    if text.count(START) != 1 or text.count(END) != 1:
        raise SolomonError(f"{page_path} needs one {START} and one {END} line around its generated block")
    head, rest = text.split(START)
    tail = rest.split(END)[1]
    write_text(page_path, f"{head}{START}\n" + "\n".join(lines) + f"\n{END}{tail}")
    return page_path
