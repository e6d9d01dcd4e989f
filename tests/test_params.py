"""params.yaml validation: unknown keys and bad values are one-line errors, never silent defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from lab.scratch import merge
from solomon.errors import SolomonError
from solomon.params import load_params


def write(tmp_path: Path, overrides: dict) -> Path:
    params = merge(yaml.safe_load((ROOT / "params.yaml").read_text()), overrides)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_repository_params_are_valid() -> None:
    params = load_params(ROOT / "params.yaml")
    assert params.corpus.source == "kjv"
    assert params.lr.warmup > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lr": {"warmpu": 10}}, "unknown key 'lr.warmpu'"),
        ({"model": {"n_embd": 100, "n_head": 3}}, "divisible by n_head"),
        ({"train": {"max_steps": 0}}, "'train.max_steps'"),
        ({"corpus": {"split": {"val": 0.4, "test": 0.2}}}, "val + test must be below 0.5"),
        ({"tokenizer": {"vocab_size": 100}}, "'tokenizer.vocab_size'"),
        ({"train": {"batch_size": 16, "accum_steps": 3}}, "accum_steps × nproc (3 × 1) must divide batch_size (16)"),
        ({"train": {"precision": "fp16"}}, "'train.precision'"),
        ({"train": {"early_stopping": {"patience": 0}}}, "'train.early_stopping.patience'"),
        ({"tokenizer": {"eod_token": " "}}, "'tokenizer.eod_token': must be a bracketed marker"),
        ({"tokenizer": {"eod_token": "the"}}, "'tokenizer.eod_token': must be a bracketed marker"),
        ({"tokenizer": {"eod_token": "<end of doc>"}}, "'tokenizer.eod_token': must be a bracketed marker"),
        ({"corpus": {"text_field": "body", "id_field": "body"}}, "'corpus.id_field': 'body' is the text field"),
    ],
)
def test_bad_params_are_one_line_errors(tmp_path: Path, overrides: dict, message: str) -> None:
    with pytest.raises(SolomonError) as info:
        load_params(write(tmp_path, overrides))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("marker", ["<|endoftext|>", "</s>", "<eos>", "[EOS]"])
def test_usual_end_of_document_markers_are_accepted(tmp_path: Path, marker: str) -> None:
    assert load_params(write(tmp_path, {"tokenizer": {"eod_token": marker}})).tokenizer.eod_token == marker


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(SolomonError, match="not found"):
        load_params(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("corpus: [unclosed\n")
    with pytest.raises(SolomonError, match="not valid YAML"):
        load_params(bad)


def test_cli_rejects_bad_flags_with_one_line(tmp_path: Path) -> None:
    import subprocess

    from conftest import LAB

    from lab.scratch import lab_env

    done = subprocess.run([*LAB, "bench", "--steps", "0"], capture_output=True, text=True, env=lab_env())
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "python -m lab bench: error: argument --steps: 0 is not at least 1"


def test_a_runs_record_reads_a_key_it_predates_as_what_the_code_did_then(tmp_path: Path) -> None:
    """A key whose default has moved since it was added (declared with ``before``) is missing from the records of
    runs made before it: replay reads such a record as the run ran, params.yaml as today's default."""
    from solomon.params import Params, before_values

    moved = before_values()
    assert moved["lr.schedule"] == "noam" and moved["lr.cooldown"] == 0.0
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for key in moved:
        section, *inner = key.split(".")
        node = params[section]
        for name in inner[:-1]:
            node = node[name]
        del node[inner[-1]]
    path = tmp_path / "hyperparameters.yaml"
    path.write_text(yaml.safe_dump(params))
    recorded, today = load_params(path, recorded=True), load_params(path)
    assert (recorded.lr.schedule, recorded.lr.cooldown) == ("noam", 0.0)
    assert today.lr == Params().lr  # params.yaml without them: today's defaults
    for key, value in moved.items():
        section, *inner = key.split(".")
        node = getattr(recorded, section)
        for name in inner:
            node = getattr(node, name)
        assert node == value, key
