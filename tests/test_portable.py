"""The portable mode (train.portable, docs/portable.md): the pins, the params it refuses, the golden digest of the
tiny portable run that every host CI lands on checks, its resume refusing the other mode, and its replay's
no-tolerance verdict. `make portable-check` runs the same run under emulated CPUs (lab/portable.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, dvc, latest_run_dir, one_line_refusal, run_train, workdir

from lab.portable import GOLDEN, data_digest, run_digest
from lab.scratch import write_params
from solomon.params import Params, read_yaml
from solomon.pipeline import pipeline_env
from solomon.portable import PINNED_ENV, environment_for, pinned
from solomon.records import PARAMS_FILE
from solomon.replay import DIFFERENT, IDENTICAL, Replayed

PORTABLE_TRAIN = {"train": {"portable": True, "precision": "fp32"}}  # over the tiny config: lab.portable's run


def test_the_portable_environment_has_every_pin_and_the_native_one_none() -> None:
    env = {"PATH": "/bin", "MKL_CBWR": "AVX2"}
    portable, native = environment_for(True, env), environment_for(False, env | PINNED_ENV)
    assert pinned(portable) and not pinned(native) and not pinned(env)  # another MKL branch is not the portable one
    assert native == {"PATH": "/bin"} and portable == {"PATH": "/bin"} | PINNED_ENV


def test_a_portable_process_replaces_itself_with_a_pinned_one() -> None:
    code = (
        "import os, sys; from solomon.portable import enter_mode; enter_mode(True); "
        "import torch, json; print(json.dumps({k: os.environ.get(k) for k in "
        "('ATEN_CPU_CAPABILITY', 'MKL_CBWR', 'ONEDNN_MAX_CPU_ISA', 'SOLOMON_PORTABLE_REEXEC')} | "
        "{'capability': torch.backends.cpu.get_cpu_capability(), 'args': sys.argv[1:]}))"
    )
    env = pipeline_env() | {"MKL_CBWR": "AVX2"}  # started with another MKL branch
    done = subprocess.run([sys.executable, "-c", code, "x", "y"], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["args"] == ["x", "y"]  # the same command line, replaced
    assert seen["SOLOMON_PORTABLE_REEXEC"] is None
    assert {k: seen[k] for k in PINNED_ENV} == PINNED_ENV and seen["capability"] == "AVX2"


@pytest.mark.parametrize(
    ("train", "named"),
    [({"portable": True, "precision": "bf16"}, "train.precision: fp32"), ({"portable": True, "precision": "fp32",
      "compile": True}, "train.compile: false")],
)  # fmt: skip
def test_portable_params_refuse_what_the_mode_cannot_pin(tmp_path: Path, train: dict, named: str) -> None:
    base = read_yaml(ROOT / PARAMS_FILE)
    base["train"] |= train
    (tmp_path / PARAMS_FILE).write_text(yaml.safe_dump(base))
    from solomon.params import load_params

    line = one_line_refusal(load_params, tmp_path / PARAMS_FILE)
    assert "train.portable" in line and named in line


def test_an_unpinned_process_refuses_to_train_portably(tiny_run) -> None:
    from solomon.errors import SolomonError
    from solomon.train.loop import train

    params, paths = tiny_run(PORTABLE_TRAIN)
    assert params.train.portable and not pinned(os.environ)
    with pytest.raises(SolomonError, match="not pinned"):
        train(params, paths)


def test_the_tiny_portable_run_matches_the_golden_digest(built_repo: Path, tmp_path: Path) -> None:
    """The bytes every x86-64 host with AVX2 must compute for the tiny portable run: a host where this fails breaks
    the portable promise (or training changed: `make portable-check PORTABLE_ARGS=--write-golden` refreshes it)."""
    cwd = workdir(built_repo, tmp_path / "portable", PORTABLE_TRAIN)
    done = run_train(built_repo, cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    digest = data_digest(built_repo) | run_digest(cwd)
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    differing = sorted(name for name in golden.keys() | digest.keys() if golden.get(name) != digest.get(name))
    assert not differing, f"the tiny portable run's {differing} differ from {GOLDEN.name} on this host"


def test_a_portable_run_refuses_to_resume_in_the_default_mode(built_repo: Path, tmp_path: Path) -> None:
    cwd = workdir(built_repo, tmp_path / "mixed", PORTABLE_TRAIN)
    assert run_train(built_repo, cwd, crash_at="after-step:15").returncode != 0  # killed after the step-10 checkpoint
    write_params(cwd, {"train": {"portable": False}})
    refused = run_train(built_repo, cwd)
    assert refused.returncode != 0
    assert "resume refused: params.train.portable differs" in refused.stderr


@pytest.mark.long
def test_a_portable_run_replays_bit_identically_and_any_difference_is_different(repo_copy: Path) -> None:
    write_params(repo_copy, PORTABLE_TRAIN | {"tracking": {"enabled": False}})
    dvc(repo_copy, "repro", "report")
    run_dir = latest_run_dir(repo_copy)
    assert Params.model_validate(read_yaml(run_dir / "hyperparameters.yaml")).train.portable
    done = subprocess.run(
        [sys.executable, "-m", "solomon", "replay"], cwd=repo_copy, env=pipeline_env(), capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert done.returncode == IDENTICAL, done.stdout + done.stderr
    assert "fp32, portable" in done.stdout and "bit-identical" in done.stdout
    # the verdict a portable run gets for a difference a default run would call within the tolerance
    drifted = {"run_id": "r", "anchor": 20, "end": 30, "recorded_on": [], "replayed_on": "k",
               "recorded_settings": "", "replayed_settings": "", "tolerance": 0.0, "first_difference": 21,
               "largest": (1e-9, "loss", 21)}  # fmt: skip
    assert Replayed(**drifted, exact=True).status == DIFFERENT
    assert "a portable run must replay bit-identically" in Replayed(**drifted, exact=True).lines()[-1]
    assert Replayed(**drifted | {"tolerance": 1e-3}).status != DIFFERENT
