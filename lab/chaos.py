"""``make chaos``: random SIGKILLs of ``dvc repro`` on the tiny config, each trial compared byte for byte with an
uninterrupted run.

In a scratch copy of the pipeline (tiny config), one uninterrupted ``dvc repro`` is the reference. Each trial
then starts the training run over (``checkpoints/`` and ``models/`` removed), kills the whole ``dvc repro``
process group with SIGKILL 1–3 times at random moments, repairs ``dvc.lock`` if a kill hit DVC's own write of
it (``solomon.dvc_lock``, as ``make run`` does), runs ``dvc repro`` to the end, and compares the model,
the step log (all columns but the wall-clock ``tokens_per_s``), the evaluation log and the held-out metrics
with the reference. The moments are drawn from a seeded generator, so a failing trial can be replayed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from lab.scratch import make_scratch_repo
from solomon import records
from solomon.dvc_lock import repair_lock
from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.pipeline import dvc_executable, pipeline_env
from solomon.records import DETERMINISTIC_COLUMNS
from solomon.tiny import TINY_OVERRIDES

MAX_KILLS = 3


def outcome(repo: Path) -> dict[str, object]:
    """What must be the same after any interruption: the run's bytes, the wall clock aside."""
    steps = (repo / records.STEP_LOG).read_text(encoding="utf-8").splitlines()
    return {
        "model": sha256_file(repo / records.WEIGHTS),
        "steps": [row.split("\t")[: len(DETERMINISTIC_COLUMNS)] for row in steps],
        "evals": sha256_file(repo / records.EVAL_LOG),
        "metrics": sha256_file(repo / records.METRICS),
    }


def _repro(repo: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([dvc_executable(), "repro"], cwd=repo, env=pipeline_env(), capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join(line for line in (done.stdout + done.stderr).splitlines()[-12:] if line.strip())
        raise SolomonError(f"chaos: dvc repro failed in {repo}: {tail}")
    return time.perf_counter() - started


def _start_over(repo: Path) -> None:
    for name in (records.CHECKPOINTS_DIR, records.MODEL_DIR):
        shutil.rmtree(repo / name, ignore_errors=True)


def _killed_repro(repo: Path, after_s: float) -> bool:
    """Start ``dvc repro``; SIGKILL its whole process group after ``after_s`` seconds. False when it finished
    first."""
    process = subprocess.Popen(
        [dvc_executable(), "repro"],
        cwd=repo,
        env=pipeline_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        process.wait(timeout=after_s)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return True


def chaos(source: Path, trials: int, seed: int, report=print) -> dict:
    """Run ``trials`` trials; ``report`` gets one line per trial. Returns the counts and each trial's record."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="solomon-chaos-") as scratch:
        repo = make_scratch_repo(source, Path(scratch) / "repo", TINY_OVERRIDES)
        _repro(repo)
        reference = outcome(repo)
        _start_over(repo)
        uninterrupted_s = _repro(repo)  # the same training run again, timed: where the kills are drawn from
        if outcome(repo) != reference:
            raise SolomonError("chaos: two uninterrupted runs differ; nothing to compare kills against")
        results = []
        for trial in range(1, trials + 1):
            _start_over(repo)
            moments = [round(rng.uniform(0.5, uninterrupted_s), 2) for _ in range(rng.randint(1, MAX_KILLS))]
            kills = [moment for moment in moments if _killed_repro(repo, moment)]
            repaired = repair_lock(repo)  # `make run` does the same before `dvc repro`
            _repro(repo)
            found = outcome(repo)
            differs = sorted(key for key in reference if found[key] != reference[key])
            results.append(
                {"trial": trial, "kills_after_s": kills, "identical": not differs, "differs": differs,
                 "lock_repaired": repaired is not None}
            )  # fmt: skip
            verdict = "bit-identical" if not differs else f"DIFFERS in {', '.join(differs)}"
            verdict += f" (first: {repaired})" if repaired else ""
            report(f"trial {trial}/{trials}: {len(kills)} kill(s) at {kills} s → {verdict}")
    identical = sum(r["identical"] for r in results)
    return {
        "trials": trials,
        "identical": identical,
        "lock_repaired": sum(r["lock_repaired"] for r in results),
        "seed": seed,
        "run_s": round(uninterrupted_s, 1),
        "results": results,
    }
