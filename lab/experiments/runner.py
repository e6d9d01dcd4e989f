"""``python -m lab docs run``: a page's commands run with DVC in a scratch copy of the pipeline, and the results each
run made kept in the page's data directory (``results``), with what running it measured."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from lab.experiments.results import EXP_SHOW_COMMAND, EXP_SHOW_TABLE, MEASURED, RESULT_FILES, THEN_LOG
from lab.experiments.spec import RUN_QUEUE, commands, default_values, experiment_name, queued, run_entry
from lab.scratch import make_scratch_repo
from solomon.atomic import staged_dir, write_json, write_text
from solomon.errors import SolomonError, last_line
from solomon.hashing import sha256_file
from solomon.pipeline import dvc_executable, pipeline_env
from solomon.records import WEIGHTS, RunFiles, read_json

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


def _dvc(args: list[str], repo: Path) -> subprocess.CompletedProcess:
    """The runner's own DVC calls (the page's command lines run in bash, with this interpreter's bin first on
    PATH); a failure fails the page."""
    return subprocess.run(
        [dvc_executable(), *args], cwd=repo, env=pipeline_env(), capture_output=True, text=True, check=True
    )


def run_page(spec: dict, page: str, source: Path, scratch: Path, data_dir: Path) -> dict[str, dict]:
    """Run a page's commands in a scratch copy of ``source``; replace ``data_dir`` with their results."""
    repo = make_scratch_repo(source, scratch, {})
    # The data stages first, once, so that each run's wall time is its own training, evaluation and report.
    _dvc(["repro", "datacard"], repo)
    if queued(spec, page):
        return _run_queued_page(spec, page, source, repo, data_dir)
    measured = {}
    with staged_dir(data_dir) as tmp:
        for run, lines in commands(spec, page, default_values(source)).items():
            *killed, last = lines  # the lines before a run's last kill their own training (`kill_after_step`)
            before = [_measured_run(line, repo, killed=True) for line in killed]
            measured[run] = _measured_run(last, repo) | {"model_sha256": sha256_file(repo / WEIGHTS)}
            if before:
                measured[run]["before"] = before
            out = _keep_results(repo, tmp / run)
            write_json(out / MEASURED, measured[run])
            then = run_entry(spec["pages"][page]["runs"][run])[1].get("then", [])
            if then:
                write_text(out / THEN_LOG, _run_then(then, repo))
        _write_exp_show(repo, tmp)
    return measured


def _measured_run(line: str, repo: Path, killed: bool = False) -> dict:
    """Run one command line under the measuring wrapper: {command, returncode, wall_s, peak_rss_mib}. A line that
    kills its own training (``killed``: the crash hook) must fail, every other must succeed."""
    print(f"experiments: {line}", flush=True)
    wrapped = [sys.executable, "-c", _MEASURE, "bash", "-c", line]
    done = subprocess.run(wrapped, cwd=repo, env=pipeline_env(), capture_output=True, text=True)
    *output, report = done.stderr.strip().splitlines()  # the measuring wrapper's JSON comes last
    figures = {"command": line, **json.loads(report)}
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
        try:
            whole = _measured_run(RUN_QUEUE, repo)
        except BaseException:  # a stop signal (solomon.stage.Stopped), Ctrl-C, or a failure of the runner itself
            # the queue's workers are DVC daemons that outlive `dvc exp run --run-all`: stop them and their stages
            subprocess.run([dvc_executable(), "queue", "stop", "--kill"], cwd=repo, env=pipeline_env(), check=False)
            raise
        for run, queued_line in queue.items():
            _dvc(["exp", "apply", experiment_name(spec, page, run)], repo)
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
    write_text(data_dir / EXP_SHOW_TABLE, _dvc(EXP_SHOW[1:], repo).stdout)
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
