"""A stop at any moment (`python -m lab stops`): a signal to the pipeline's launcher at chosen moments after a
stage's process appears — during its start-up as well as its work — and what is left of the pipeline a while later.

Each case runs in a copy of a tiny pipeline: ``dvc repro`` or ``make run`` (the repository's Makefile) started in a
session of its own, or a queued experiment (`dvc exp run --queue`, `dvc queue start`) whose task's `dvc` is the
launcher. Once a process running ``stages/<stage>.py`` exists, the runner waits the case's delay and sends the
signal to the launcher's PID alone, as `timeout`, a supervisor or `kill PID` do. The pipeline's processes are found
three ways — the launcher's descendants seen before the signal, its process group, and every process whose working
directory lies in the copy — and watched by PID (and start time) for ``WATCH_S``. The record keeps, per case, how long
the last of them lived, what was still alive at the end, the stage's `error:` lines, and the half-written files left.
``resume_matches`` then runs a plain ``dvc repro`` of the stage and compares its outputs with an uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from lab.scratch import LAB_ROOT, make_scratch_repo, write_params
from solomon.pipeline import dvc_executable, output_paths, pipeline_env, run
from solomon.tiny import TINY_OVERRIDES

MOMENTS_S = (0.0, 0.01, 0.05, 0.1, 0.25, 1.0, 3.0)
LAUNCHERS = ("dvc repro", "make run", "queued dvc exp run")
SIGNALS = ("SIGTERM", "SIGHUP")
STAGES = ("prepare", "train")  # a data stage (the first) and the train stage
WATCH_S = 10.0  # seconds: "alive this long after the signal" is what the sweep looks for
# The train stage of the sweep runs longer than the tiny config's 30 steps, so that a late signal lands mid-training.
TRAIN_STEPS = 200
STAGE_OUTPUTS = {"prepare": ["data/corpus"], "train": ["models", "reports/train_log.tsv", "reports/train_evals.jsonl"]}
# The launchers start with SIGHUP's default action, as from a terminal, even where the sweep runs under nohup (an
# ignored signal stays ignored across exec, and would make every SIGHUP case a no-op); `env` execs, keeping the PID.
DEFAULT_SIGHUP = ["env", "--default-signal=HUP"]
# A stopped train stage still appends its last step and writes a checkpoint, and `dvc` records a stage that ended
# before it stopped in dvc.lock: every other output of the pipeline written after the signal is work that ran on.
STOPPING_WRITES = {"reports/train_log.tsv", "reports/train_evals.jsonl", "dvc.lock"}


@dataclass
class Outcome:
    launcher: str
    stage: str
    signal: str
    delay_s: float
    stage_started: bool  # the stage's process existed when the signal was sent
    stage_running: bool  # a stage (this one or a later one) was running at the signal, to say why it stopped
    last_exit_s: float | None  # when the last process of the pipeline was gone, after the signal; None: not in WATCH_S
    alive_after: list[str] = field(default_factory=list)  # "pid cmdline" of each still alive after WATCH_S
    ran_on: list[str] = field(default_factory=list)  # the pipeline's outputs written after the signal
    lines: list[str] = field(default_factory=list)  # the `error:` lines the pipeline printed
    half_written: list[str] = field(default_factory=list)
    resume_matches: bool | None = None  # a plain `dvc repro` afterwards: the uninterrupted run's bytes


def build_base(root: Path, stage: str, built: Path | None = None) -> Path:
    """A tiny pipeline in which ``stage`` is the next to run: nothing built (prepare), or every stage built (a copy
    of ``built`` where given) and the train stage's steps raised, its checkpoints removed so that it starts at 0."""
    if stage != "train":
        return make_scratch_repo(LAB_ROOT, root / f"base-{stage}", TINY_OVERRIDES)
    if built is None:
        built = make_scratch_repo(LAB_ROOT, root / "built", TINY_OVERRIDES)
        done = run([dvc_executable(), "repro"], built, check=False)
        if done.returncode != 0:
            raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    repo = root / f"base-{stage}"
    left_out = shutil.ignore_patterns("mlflow.db", "mlartifacts", "checkpoints")
    shutil.copytree(built, repo, symlinks=True, ignore=left_out)
    raised = {"max_steps": TRAIN_STEPS, "eval_interval": 50, "ckpt_interval": 50}
    write_params(repo, {"train": raised, "tracking": {"enabled": False}})
    for args in (["git", "add", "-A"], ["git", "commit", "-q", "-m", "built; the train stage's steps raised"]):
        run(args, repo)
    return repo


def reference_outputs(root: Path, base: Path, stage: str) -> dict[str, str]:
    """The stage's outputs after an uninterrupted `dvc repro <stage>` in a copy of ``base``."""
    repo = copy_repo(base, root / f"reference-{stage}")
    done = run([dvc_executable(), "repro", stage], repo, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    return outputs(repo, stage)


def copy_repo(base: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(base, dest, symlinks=True)
    return dest


def outputs(repo: Path, stage: str) -> dict[str, str]:
    digests = {}
    for name in STAGE_OUTPUTS[stage]:
        path = repo / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            text = file.read_bytes()
            if file.suffix == ".tsv":  # the step log's last columns are wall-clock times
                text = b"\n".join(b"\t".join(row.split(b"\t")[:4]) for row in text.splitlines())
            digests[str(file.relative_to(repo))] = hashlib.sha256(text).hexdigest()
    return digests


def last_written(path: Path) -> float:
    """The latest modification time of ``path`` or anything under it (0 where there is nothing, or no longer)."""
    try:
        files = [path, *path.rglob("*")] if path.is_dir() else [path]
        return max(file.lstat().st_mtime for file in files)
    except OSError:
        return 0.0


def half_written(repo: Path) -> list[str]:
    """Temporary or displaced files a write leaves only while it is in progress (solomon.atomic). ``os.walk`` passes
    over folders removed while it walks (a queued task's copy of the workspace goes with its task)."""
    found = []
    for folder, dirs, files in os.walk(repo):
        dirs[:] = [name for name in dirs if name not in (".git", ".dvc")]
        found += [str(Path(folder, name).relative_to(repo)) for name in dirs + files if name.endswith((".tmp", ".old"))]
    return sorted(found)


def make_run_command() -> list[str]:
    """`make run` from the repository's Makefile in the copy, with this venv (setup and the plots template count as
    done, so make goes straight to `dvc repro`)."""
    bin_dir = Path(dvc_executable()).parent
    return ["make", "-s", "-f", str(LAB_ROOT / "Makefile"), f"BIN={bin_dir}", "-o", "setup", "-o", "plots-template",
            "run"]  # fmt: skip


def pipeline_processes(
    repo: Path, group: int, seen: dict[int, psutil.Process], above: set[int]
) -> dict[int, psutil.Process]:
    """``seen`` plus every live process in ``group`` or working in ``repo`` (a queued run's copy is inside it), but
    those ``above`` the launcher (a queue's worker, which is meant to outlive its tasks)."""
    found = dict(seen)
    for process in psutil.process_iter(["cwd"]):
        try:
            in_repo = str(repo) in (process.info["cwd"] or "")
            if process.pid not in above and (in_repo or os_getpgid(process.pid) == group):
                found.setdefault(process.pid, process)
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def os_getpgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def alive(processes: dict[int, psutil.Process]) -> list[psutil.Process]:
    live = []
    for process in processes.values():
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                live.append(process)
        except psutil.Error:
            continue
    return live


def describe_process(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:120]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def stage_process(processes: dict[int, psutil.Process], stage: str) -> psutil.Process | None:
    """The process running ``stages/<stage>.py`` (``*``: any stage), or None."""
    for process in list(processes.values()):
        try:
            command = " ".join(process.cmdline())
            if f"stages/{stage}.py" in command or (stage == "*" and "stages/" in command):
                return process
        except psutil.Error:
            continue
    return None


def start_launcher(launcher: str, repo: Path, log: Path) -> tuple[subprocess.Popen | None, psutil.Process | None]:
    """Start ``launcher`` in ``repo``; for a queued run the queue's worker is started and the task's `dvc` is
    found later (``queued_launcher``)."""
    env = pipeline_env()
    out = log.open("w")
    if launcher == "queued dvc exp run":
        run([dvc_executable(), "exp", "run", "--queue", "-n", "stop-sweep"], repo)
        subprocess.run([*DEFAULT_SIGHUP, dvc_executable(), "queue", "start"], cwd=repo, env=env, stdout=out,
                       stderr=subprocess.STDOUT, check=True)  # fmt: skip
        return None, None
    command = [*DEFAULT_SIGHUP, *([dvc_executable(), "repro"] if launcher == "dvc repro" else make_run_command())]
    top = subprocess.Popen(command, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return top, psutil.Process(top.pid)


def queued_launcher(repo: Path) -> psutil.Process | None:
    """The queued task's `dvc exp exec-run`: what runs the task's pipeline (the queue's worker outlives it)."""
    for process in psutil.process_iter(["cmdline"]):
        if "exec-run" in (process.info["cmdline"] or []) and str(repo) in " ".join(process.info["cmdline"] or []):
            return process
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if "exec-run" in (process.info["cmdline"] or []) and str(repo) in (process.info["cwd"] or ""):
            return process
    return None


def run_case(base: Path, work: Path, launcher: str, stage: str, signal_name: str, delay_s: float,
             reference: dict[str, str] | None) -> Outcome:  # fmt: skip
    """One case: a fresh copy of ``base``, the launcher, the signal ``delay_s`` after the stage's process appears."""
    repo = copy_repo(base, work / "repo")
    log = work / "launcher.log"
    top, leader = start_launcher(launcher, repo, log)
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 300
    target = stage_process(seen, stage)
    while target is None and time.monotonic() < deadline:
        if leader is None:
            leader = queued_launcher(repo)
        if leader is not None:
            try:
                for child in [leader, *leader.children(recursive=True)]:
                    seen.setdefault(child.pid, child)
            except psutil.Error:
                pass
        target = stage_process(seen, stage)
        if target is None:
            time.sleep(0.002)
    started = target is not None
    try:  # a queued run's stage works in a copy of the repository under .dvc/tmp/exps
        stage_dir = Path(target.cwd()) if target is not None else repo
    except psutil.Error:
        stage_dir = repo
    if leader is None:
        raise RuntimeError(f"no launcher appeared for {launcher}: {log.read_text()[-2000:]}")
    above = {parent.pid for parent in leader.parents()} if launcher == "queued dvc exp run" else set()
    time.sleep(delay_s)
    try:
        seen.update({child.pid: child for child in leader.children(recursive=True)})
        running = stage_process({pid: p for pid, p in seen.items() if p.is_running()}, "*") is not None
        group = os_getpgid(leader.pid) or leader.pid
        leader.send_signal(getattr(signal, signal_name))
    except psutil.Error:
        group, running = leader.pid, False
    signalled, signalled_at = time.monotonic(), time.time()
    processes = pipeline_processes(repo, group, seen, above)
    last_exit_s = None
    while time.monotonic() - signalled < WATCH_S:
        processes = pipeline_processes(repo, group, processes, above)
        if not alive(processes):
            last_exit_s = round(time.monotonic() - signalled, 2)
            break
        time.sleep(0.05)
    left = alive(pipeline_processes(repo, group, processes, above))
    left_alive = [describe_process(process) for process in left]
    outcome = Outcome(launcher, stage, signal_name, delay_s, started, running, last_exit_s, left_alive)
    for process in left:  # the orphans of the case, by PID
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=10)
    if top is not None:
        top.wait(timeout=30)
    told = log.read_text(errors="replace")
    for path in (repo / ".dvc" / "tmp" / "exps" / "run").glob("*/*.out"):
        told += path.read_text(errors="replace")
    outcome.lines = sorted({line.strip() for line in told.splitlines() if line.strip().startswith("error:")})
    outcome.half_written = half_written(repo)
    # the paths from the repository's dvc.yaml: a queued run's copy may be gone with its task by now
    outcome.ran_on = [path for path in output_paths(repo) if path not in STOPPING_WRITES
                      and last_written(stage_dir / path) > signalled_at]  # fmt: skip
    if reference is not None and launcher != "queued dvc exp run":  # a queued run's copy is gone with its task
        done = run([dvc_executable(), "repro", stage], repo, check=False)
        outcome.resume_matches = done.returncode == 0 and outputs(repo, stage) == reference
    if launcher == "queued dvc exp run":
        subprocess.run([dvc_executable(), "queue", "stop", "--kill"], cwd=repo, env=pipeline_env(),
                       capture_output=True, check=False)  # fmt: skip
    shutil.rmtree(repo, ignore_errors=True)
    return outcome


def sweep(root: Path, launchers=LAUNCHERS, stages=STAGES, signals=SIGNALS, moments=MOMENTS_S,
          resume: bool = True, progress=print) -> list[Outcome]:  # fmt: skip
    outcomes = []
    for stage in stages:
        base = build_base(root, stage)
        reference = reference_outputs(root, base, stage) if resume else None
        for launcher in launchers:
            for signal_name in signals:
                for delay_s in moments:
                    # a case of its own: a queued task's worker may still write in the previous case's copy
                    work = root / f"case-{len(outcomes)}"
                    work.mkdir(parents=True)
                    outcome = run_case(base, work, launcher, stage, signal_name, delay_s, reference)
                    progress(json.dumps(asdict(outcome)))
                    outcomes.append(outcome)
    return outcomes


def record(outcomes: list[Outcome], label: str, code: str) -> dict:
    from solomon.machine import describe  # torch: only once the sweep is done

    return {
        "label": label,
        "code": code,
        "host": describe(),
        "watch_s": WATCH_S,
        "cases": [asdict(outcome) for outcome in outcomes],
    }


def table(record_: dict) -> str:
    """The record as a table: one row per launcher × stage × signal, a column per moment (the time the last process
    of the pipeline lived after the signal, or what was still alive after ``WATCH_S``)."""
    moments = sorted({case["delay_s"] for case in record_["cases"]})
    header = "| launcher | stage | signal | " + " | ".join(f"{m * 1000:g} ms" for m in moments) + " |"
    rows = [header, "|" + "---|" * (3 + len(moments))]
    keys: dict[tuple, dict[float, dict]] = {}
    for case in record_["cases"]:
        keys.setdefault((case["launcher"], case["stage"], case["signal"]), {})[case["delay_s"]] = case
    for (launcher, stage, signal_name), cases in keys.items():
        cells = []
        for moment in moments:
            case = cases.get(moment)
            if case is None:
                cells.append("")
            elif case["alive_after"]:
                cells.append(f"**{len(case['alive_after'])} alive**")
            elif case["ran_on"]:
                cells.append(f"**ran on, done {case['last_exit_s']:.1f} s**")
            else:
                cells.append(f"gone {case['last_exit_s']:.1f} s")
        rows.append(f"| `{launcher}` | {stage} | {signal_name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def render_into(page: Path, record_: dict, source: Path) -> str:
    """Rewrite the table of ``record_``'s label in ``page`` (between its ``stops:<label>`` markers, where there are
    some), with its host and source beside it; returns the table."""
    host = record_["host"]["kind"]
    rendered = (
        f"<!-- generated by `python -m lab stops` from {source.as_posix()}: do not edit -->\n"
        f"Code {record_['code']}; host: {host}; the time the last process of the pipeline lived after the signal, "
        f"or how many were still alive {record_['watch_s']:g} s later.\n\n{table(record_)}\n"
    )
    start, end = f"<!-- stops:{record_['label']}:start -->", f"<!-- stops:{record_['label']}:end -->"
    text = page.read_text() if page.exists() else ""
    if start in text and end in text:
        head, rest = text.split(start, 1)
        page.write_text(f"{head}{start}\n{rendered}{end}{rest.split(end, 1)[1]}")
    return rendered
