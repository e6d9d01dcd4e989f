"""`make portable-check`: the tiny config trained in portable mode (``train.portable``) gives the same bytes natively
and on emulated AVX2-only CPUs of both vendors, and ``solomon replay`` of it under emulation is bit-identical.

In a scratch copy the whole pipeline runs natively (``dvc repro``); then, for each CPU of ``lab.emulate``, the data
stages and the train stage run again under qemu-user in copies of it, and ``solomon replay`` of the native run's
stretch between its anchors. What a run computed (``run_digest``: token files, tokenizer, the model's weights, the
step log without its timing column, the evaluations and their samples, the train metrics, the model + optimiser
state at each anchor) must hash alike everywhere. For contrast the same config in the default mode runs natively and
under the first emulated CPU, where it is expected to differ. The record goes to
``reports/bench/portable-<time>.json`` and its table to docs/portable.md's generated block.

    python -m lab portable [--write-golden]   (--write-golden: the native digest to tests/golden/, what every
                                               CI host checks its own portable run against)
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from lab.emulate import EMULATORS, emulated_env, python_command, require_emulator
from lab.scratch import LAB_ROOT, lab_env, make_scratch_repo, merge
from solomon.atomic import write_json
from solomon.hashing import sha256_file
from solomon.pipeline import dvc_executable, run, stage_command
from solomon.portable import PINNED_ENV
from solomon.records import read_json
from solomon.tiny import TINY_OVERRIDES

# The tiny config in portable mode (fp32, as the mode requires), without MLflow.
PORTABLE = merge(TINY_OVERRIDES, {"train": {"portable": True, "precision": "fp32"}, "tracking": {"enabled": False}})
DEFAULT = merge(PORTABLE, {"train": {"portable": False}})  # the same run in the default mode: the contrast
GOLDEN = LAB_ROOT / "tests/golden/portable-tiny.json"
PAGE = LAB_ROOT / "docs/portable.md"
START, END = "<!-- portable:start -->", "<!-- portable:end -->"
DATA_STAGES = ("prepare", "tokenizer")
TIMING_COLUMNS = ("tokens_per_s",)  # the step log's wall-clock column: not what a run computes


def _steps_digest(path: Path) -> str:
    """The step log without its timing columns."""
    rows = list(csv.DictReader(path.open(encoding="utf-8"), delimiter="\t"))
    out = io.StringIO()
    for row in rows:
        out.write("\t".join(value for key, value in row.items() if key not in TIMING_COLUMNS) + "\n")
    return hashlib.sha256(out.getvalue().encode()).hexdigest()


def data_digest(workdir: Path) -> dict[str, str]:
    """What the data stages computed in ``workdir``: the token files and the tokenizer."""
    names = ("data/tokens/train.bin", "data/tokens/val.bin", "data/tokens/test.bin", "data/tokenizer.json")
    return {name: sha256_file(workdir / name) for name in names}


def run_digest(workdir: Path) -> dict[str, str]:
    """What the train stage computed in ``workdir`` (where it ran), by name; nothing that records time or host."""
    found = {
        "models/model.safetensors": sha256_file(workdir / "models/model.safetensors"),
        "models/config.json": sha256_file(workdir / "models/config.json"),
        "reports/train_log.tsv (without tokens_per_s)": _steps_digest(workdir / "reports/train_log.tsv"),
        "reports/train_evals.jsonl": sha256_file(workdir / "reports/train_evals.jsonl"),
        "reports/train_metrics.json": sha256_file(workdir / "reports/train_metrics.json"),
    }
    for anchor in read_json(workdir / "anchors/index.json")["anchors"]:
        found[f"model + optimiser state at step {anchor['step']}"] = anchor["state_sha256"]
    return found


def _run(command: list[str], cwd: Path, emulator: str | None, portable: bool) -> float:
    """``command`` (a Python argv) in ``cwd``, natively or under ``emulator``, in the mode's environment; seconds."""
    env = lab_env() | (PINNED_ENV if portable else {})
    if emulator:
        env = emulated_env(env)
    started = time.perf_counter()
    done = subprocess.run([*python_command(emulator), *command[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"portable: {' '.join(command[1:3])} {emulator or 'native'} failed: {done.stderr[-800:]}")
    return time.perf_counter() - started


# What a copy made to run a stage again leaves out: the training's outputs and the git history.
OUTPUTS = frozenset({"models", "checkpoints", "anchors", "reports", ".git"})


def _copy_without_outputs(repo: Path, dest: Path) -> Path:
    """A copy of ``repo``'s code and data, without the top-level ``OUTPUTS``."""
    dest.mkdir(parents=True)
    for entry in repo.iterdir():
        if entry.name not in OUTPUTS:
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, dest / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, dest / entry.name, follow_symlinks=False)
    return dest


def build(scratch: Path, overrides: dict) -> Path:
    """The whole tiny pipeline with ``overrides``, natively, in ``scratch``."""
    repo = make_scratch_repo(LAB_ROOT, scratch, overrides)
    done = run([dvc_executable(), "repro"], repo, check=False)
    if done.returncode:
        raise SystemExit(f"portable: dvc repro failed: {(done.stdout + done.stderr)[-800:]}")
    return repo


def train_elsewhere(repo: Path, dest: Path, emulator: str | None, portable: bool) -> tuple[Path, float]:
    """The train stage again in a copy of ``repo``'s code and data (no outputs), under ``emulator``."""
    copy = _copy_without_outputs(repo, dest)
    return copy, _run([*stage_command(copy, "train"), "--no-gemm-peak"], copy, emulator, portable)


def data_elsewhere(repo: Path, dest: Path, emulator: str) -> tuple[Path, float]:
    """The prepare and tokenizer stages again in a copy of ``repo`` without their outputs, under ``emulator``."""
    copy = _copy_without_outputs(repo, dest)
    for produced in ("data/corpus", "data/tokens", "data/tokenizer.json"):
        path = copy / produced
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    seconds = sum(_run(stage_command(copy, stage), copy, emulator, True) for stage in DATA_STAGES)
    return copy, seconds


def replay_under(repo: Path, emulator: str) -> tuple[int, str, float]:
    """``solomon replay`` of ``repo``'s latest run (from its first anchor) under ``emulator``: (exit, last line,
    seconds)."""
    env = emulated_env(lab_env() | PINNED_ENV)
    started = time.perf_counter()
    done = subprocess.run([*python_command(emulator), "-m", "solomon", "replay"], cwd=repo, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return done.returncode, lines[-1] if lines else "", time.perf_counter() - started


def differing(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))


def check(scratch: Path) -> dict:
    require_emulator()
    native_repo = build(scratch / "native", PORTABLE)
    native = data_digest(native_repo) | run_digest(native_repo)
    record: dict = {"native": native, "emulated": {}, "replay": {}, "seconds": {}}
    for name in EMULATORS:
        data_copy, data_s = data_elsewhere(native_repo, scratch / f"data-{name}", name)
        train_copy, train_s = train_elsewhere(native_repo, scratch / f"train-{name}", name, True)
        record["emulated"][name] = data_digest(data_copy) | run_digest(train_copy)
        status, line, replay_s = replay_under(native_repo, name)
        record["replay"][name] = {"exit": status, "verdict": line}
        record["seconds"][name] = {"data stages": round(data_s, 1), "train": round(train_s, 1),
                                   "replay": round(replay_s, 1)}  # fmt: skip
    contrast = next(iter(EMULATORS))
    default_repo = build(scratch / "default", DEFAULT)
    default_copy, _ = train_elsewhere(default_repo, scratch / f"default-{contrast}", contrast, False)
    record["default_mode"] = {
        "emulator": contrast,
        "native": run_digest(default_repo),
        "emulated": run_digest(default_copy),
    }
    return record


def table(record: dict) -> str:
    emulators = list(record["emulated"])
    rows = ["| output | native SHA256 | " + " | ".join(f"emulated {name}" for name in emulators) + " |",
            "|---|---|" + "---|" * len(emulators)]  # fmt: skip
    for name, digest in record["native"].items():
        same = ["**equal**" if record["emulated"][e].get(name) == digest else "differs" for e in emulators]
        rows.append(f"| {name} | `{digest[:12]}…` | " + " | ".join(same) + " |")
    replays = "; ".join(f"{name}: exit {r['exit']}, “{r['verdict']}”" for name, r in record["replay"].items())
    contrast = record["default_mode"]
    default_differs = differing(contrast["native"], contrast["emulated"])
    return (
        "\n".join(rows)
        + f"\n\n`solomon replay` of the native portable run under each emulated CPU: {replays}.\n\n"
        + f"The same config in the default mode (`train.portable: false`), natively and under {contrast['emulator']}: "
        + (f"{len(default_differs)} of {len(contrast['native'])} outputs differ" if default_differs else "all equal")
        + ".\n"
    )


def write_page(record: dict) -> Path:
    block = (
        f"<!-- generated by `python -m lab portable` from reports/bench/portable-{record['time']}.json: "
        f"do not edit -->\n\nMeasured {record['time']} on `{record['machine']['kind']}`.\n\n" + table(record)
    )
    text = PAGE.read_text(encoding="utf-8")
    before, _, rest = text.partition(START)
    _, _, after = rest.partition(END)
    PAGE.write_text(f"{before}{START}\n{block}{END}{after}", encoding="utf-8")
    return PAGE


def failures(record: dict) -> list[str]:
    out = [f"{name}: {', '.join(differing(record['native'], d))} differ" for name, d in record["emulated"].items()
           if differing(record["native"], d)]  # fmt: skip
    out += [f"replay under {name}: exit {r['exit']}: {r['verdict']}" for name, r in record["replay"].items()
            if r["exit"] != 0]  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab portable", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--write-golden", action="store_true", help="write the native digest to tests/golden/")
    args = parser.parse_args(argv)
    from solomon.machine import describe

    with tempfile.TemporaryDirectory(prefix="solomon-portable-") as scratch:
        record = check(Path(scratch))
    record |= {"time": datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ"), "machine": describe()}
    out = LAB_ROOT / "reports/bench" / f"portable-{record['time']}.json"
    write_json(out, record)
    print(table(record))
    print(f"record: {out}\npage: {write_page(record)}")
    if args.write_golden:
        write_json(GOLDEN, record["native"])
        print(f"golden: {GOLDEN}")
    if problems := failures(record):
        raise SystemExit("portable: not the same bytes:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
