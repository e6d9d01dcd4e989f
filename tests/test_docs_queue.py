"""A docs page with ``queue: true``: its runs are queued with ``dvc exp run --queue`` and run by one
``dvc exp run --run-all`` (the commands; the real queue runs in `python -m lab docs run levers`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from lab.experiments.spec import RUN_QUEUE, SPEC, all_commands, default_values, load_spec, queued
from solomon.errors import SolomonError

DEFAULTS = {"params.lr.warmup": 200, "params.lr.peak": 0.001, "params.train.max_steps": 4000}


def queued_spec() -> dict:
    runs = {"a": {"lr.warmup": 1}, "b": {"lr.peak": 0.5}}
    return {"base": {"train.max_steps": 5}, "pages": {"p": {"queue": True, "runs": runs, "charts": [], "columns": {}}}}


def test_a_queued_page_queues_each_run_then_runs_the_queue_once() -> None:
    lines = all_commands(queued_spec(), "p", DEFAULTS)
    assert lines == [
        "dvc exp run --queue -n p-a -S train.max_steps=5 -S lr.peak=0.001 -S lr.warmup=1",
        "dvc exp run --queue -n p-b -S train.max_steps=5 -S lr.peak=0.5 -S lr.warmup=200",
        RUN_QUEUE,
    ]
    spec = queued_spec()
    spec["pages"]["p"]["queue"] = False
    assert RUN_QUEUE not in all_commands(spec, "p", DEFAULTS)


def test_a_queued_page_refuses_run_options_and_a_non_boolean_queue(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copyfile(ROOT / "params.yaml", tmp_path / "params.yaml")
    path = tmp_path / "docs/experiments.yaml"
    spec = queued_spec()
    spec["pages"]["p"]["runs"]["b"] = {"params": {"lr.peak": 0.5}, "fresh": True}
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SolomonError, match=r"run b: unknown option 'fresh'.*queue: true"):
        load_spec(path)
    spec = queued_spec()
    spec["pages"]["p"]["queue"] = "yes"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SolomonError, match="`queue` must be true or false"):
        load_spec(path)


def test_the_levers_page_is_queued() -> None:
    spec = load_spec(ROOT / SPEC)
    assert queued(spec, "levers")
    assert all_commands(spec, "levers", default_values(ROOT))[-1] == RUN_QUEUE
