"""`solomon replay` on the tiny pipeline: the final stretch replays bit-identical here; with torch's kernels capped
one instruction set lower (another machine kind, as a node of an older CPU would be) it diverges within the
tolerance, naming both kinds, and beyond a tolerance too tight for that; bad input exits 2 with one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import dvc

from lab.scratch import write_params
from solomon.errors import SolomonError
from solomon.params import PARAMS_FILE, load_params
from solomon.pipeline import pipeline_env
from solomon.train.precision import for_this_host

SOLOMON = str(Path(sys.executable).parent / "solomon")
LOWER = {"AVX512": "avx2", "AVX2": "default"}  # ATEN_CPU_CAPABILITY one level below torch's capability here


def replay(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SOLOMON, "replay", *args, "--root", str(repo)],
        cwd=repo,
        env=pipeline_env() | (env or {}),
        capture_output=True,
        text=True,
    )


def line(output: str, start: str) -> str:
    return next(text for text in output.splitlines() if text.startswith(start))


def test_the_final_stretch_replays_bit_identical(built_repo: Path) -> None:
    done = replay(built_repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps 21-30 from the anchor at step 20 (10 steps" in done.stdout
    assert "bit-identical: 10 steps' loss and grad_norm as logged, and the model+optimizer state at step 30" in (
        done.stdout
    )


@pytest.mark.long
def test_a_run_with_a_weight_average_replays_it_bit_identical_too(repo_copy: Path) -> None:
    write_params(repo_copy, {"train": {"ema_decay": 0.9}})
    dvc(repo_copy, "repro")
    done = replay(repo_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "and the model+optimizer+average state at step 30" in done.stdout, done.stdout


def test_another_machine_kind_diverges_within_the_tolerance_and_both_kinds_are_named(built_repo: Path) -> None:
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in LOWER:
        pytest.skip(f"torch's capability here is {capability}: no lower x86 level to cap it to")
    lower = {"ATEN_CPU_CAPABILITY": LOWER[capability]}
    done = replay(built_repo, env=lower)
    assert done.returncode == 3, done.stdout + done.stderr
    verdict = line(done.stdout, "diverged at step")
    assert re.match(r"diverged at step \d+: largest relative difference [0-9.e-]+ \((loss|grad_norm), step", verdict)
    assert verdict.endswith("within the tolerance 0.001"), verdict
    assert f"torch {capability}" in line(done.stdout, "recorded on:")
    assert f"torch {LOWER[capability].upper()}" in line(done.stdout, "replayed on:")
    strict = replay(built_repo, "--tolerance", "1e-9", env=lower)
    assert strict.returncode == 1 and "beyond the tolerance 1e-09" in strict.stdout, strict.stdout + strict.stderr


def test_a_shorter_stretch_and_another_thread_count_are_named(built_repo: Path) -> None:
    done = replay(built_repo, "--from-step", "20", "--steps", "5", "--threads", "2")
    assert done.returncode in (0, 3), done.stdout + done.stderr  # tiny matrices may not split across threads
    assert "steps 21-25" in done.stdout
    precision = for_this_host(load_params(built_repo / PARAMS_FILE).train)  # the run's setting, resolved here
    assert line(done.stdout, "recorded on:").endswith(f"threads 1, {precision}")
    assert line(done.stdout, "replayed on:").endswith(f"threads 2, {precision}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from-step", "7"), "--from-step 7: no anchor there; the run kept anchors at steps 20, 30"),
        (("--from-step", "30"), "the anchor at step 30 is the end of the run (30 steps)"),
        (("--steps", "50"), "--steps 50: the run logged 10 steps after step 20"),
        (("no-such-run",), "no run 'no-such-run'"),
    ],
)
def test_bad_input_exits_2_with_one_line(built_repo: Path, args: tuple[str, ...], message: str) -> None:
    done = replay(built_repo, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_replay_computes_in_the_precision_the_run_recorded() -> None:
    """What auto resolved to is read from the anchor, whatever this host would choose; a run from before auto
    computed in its explicit setting; an auto run whose anchor lacks it is refused in one line."""
    from solomon.replay import recorded_precision

    assert recorded_precision({"environment.precision": "fp32"}, "auto", "r") == "fp32"
    assert recorded_precision({}, "bf16", "r") == "bf16"
    refused = re.escape("run r's anchor does not record the precision train.precision: auto")
    with pytest.raises(SolomonError, match=refused):
        recorded_precision({}, "auto", "r")
