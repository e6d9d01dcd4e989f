"""A stop at any moment stops the work (lab/stops.py): a real signal to the pipeline's launcher alone — `dvc repro`,
`make run`, a queued `dvc exp run`'s task — at moments from the instant a stage's process exists (its start-up:
the interpreter, the imports) to seconds into its work. No process of the pipeline is alive 10 s later (by PID:
the launcher's descendants, its process group and every process working in the repository), the stage says why in
its own line, nothing is half-written, and a plain `dvc repro` of the stage ends with an uninterrupted run's bytes.
`make test` runs a slice across the moments; `make test-long` the whole sweep (its record: docs/resume.md)."""

from __future__ import annotations

import pytest

from lab.stops import LAUNCHERS, MOMENTS_S, SIGNALS, STAGES, Outcome, build_base, reference_outputs, run_case


@pytest.fixture(scope="module")
def bases(built_repo, tmp_path_factory) -> dict:
    """Per stage: a tiny pipeline where it is next to run, and its outputs after an uninterrupted run."""
    root = tmp_path_factory.mktemp("stops")
    found = {}
    for stage in STAGES:
        base = build_base(root, stage, built_repo)
        found[stage] = (base, reference_outputs(root, base, stage))
    return found


def check(outcome: Outcome) -> None:
    case = f"{outcome.launcher} × {outcome.stage} × {outcome.signal} at {outcome.delay_s} s"
    assert outcome.stage_started, f"{case}: the stage's process never appeared"
    assert not outcome.alive_after, f"{case}: alive 10 s later: {outcome.alive_after}"
    assert not outcome.ran_on, f"{case}: written after the signal: {outcome.ran_on}"
    # a signal between two stages stops `dvc` with none running, to say so; the queue's worker may kill its task's
    # group before it can say
    if outcome.stage_running and outcome.launcher != "queued dvc exp run":
        assert any(line.startswith("error: stopping") for line in outcome.lines), f"{case}: {outcome.lines}"
    assert not any("Traceback" in line for line in outcome.lines), f"{case}: {outcome.lines}"
    assert not outcome.half_written, f"{case}: half-written: {outcome.half_written}"
    assert outcome.resume_matches is not False, f"{case}: a plain `dvc repro` afterwards ended with other bytes"


# Across the moments, both stages, both signals and both foreground launchers: the start-up window (0 to 250 ms),
# its end and the work.
SLICE = (
    ("dvc repro", "train", "SIGTERM", 0.0),
    ("dvc repro", "prepare", "SIGHUP", 0.01),
    ("make run", "train", "SIGHUP", 0.1),
    ("make run", "prepare", "SIGTERM", 0.25),
)


@pytest.mark.parametrize(("launcher", "stage", "signal_name", "delay_s"), SLICE)
def test_a_signal_to_the_launcher_at_any_moment_stops_the_pipeline(
    bases: dict, tmp_path, launcher: str, stage: str, signal_name: str, delay_s: float
) -> None:
    base, reference = bases[stage]
    outcome = run_case(base, tmp_path, launcher, stage, signal_name, delay_s, reference)
    check(outcome)
    assert outcome.resume_matches is True


@pytest.mark.long
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_whole_sweep_leaves_no_process(bases: dict, tmp_path, launcher: str) -> None:
    for stage in STAGES:
        base, reference = bases[stage]
        for signal_name in SIGNALS:
            for delay_s in MOMENTS_S:
                work = tmp_path / f"{stage}-{signal_name}-{delay_s}"
                work.mkdir()
                # the resume is checked at the first moment (the slice above checks it across the moments)
                check(run_case(base, work, launcher, stage, signal_name, delay_s, reference if delay_s == 0 else None))


@pytest.mark.long
@pytest.mark.parametrize("delay_s", [0.0, 1.5])
def test_torchruns_workers_stop_with_the_train_stage_launcher(bases: dict, tmp_path, delay_s: float) -> None:
    """train.nproc 2: the stage becomes torchrun (the same PID) whose workers lead sessions of their own. A signal to
    `dvc repro` as the stage starts, or while torchrun starts its workers, leaves neither torchrun nor a worker."""
    import subprocess

    from lab.scratch import write_params
    from lab.stops import copy_repo

    base = copy_repo(bases["train"][0], tmp_path / "base")
    write_params(base, {"train": {"nproc": 2, "accum_steps": 1, "threads": 1}})
    for args in (["git", "add", "-A"], ["git", "commit", "-q", "-m", "two ranks"]):
        subprocess.run(args, cwd=base, check=True, capture_output=True)
    reference = reference_outputs(tmp_path, base, "train")
    work = tmp_path / "case"
    work.mkdir()
    outcome = run_case(base, work, "dvc repro", "train", "SIGTERM", delay_s, reference)
    check(outcome)
    assert outcome.resume_matches is True
