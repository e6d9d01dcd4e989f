"""The model file: round trip, tied weights stored once, and a clear error for a bad or mismatched file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from solomon.errors import SolomonError
from solomon.model import weights
from solomon.model.gpt import GPT, GPTConfig


def saved(tmp_path: Path) -> tuple[GPT, Path]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=1, n_head=2, n_embd=16))
    weights.save(model, tmp_path / "models")
    return model, tmp_path / "models"


def test_round_trip_keeps_every_weight_and_the_tie(tmp_path: Path) -> None:
    model, model_dir = saved(tmp_path)
    loaded = weights.load(model_dir)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert loaded.lm_head.weight.data_ptr() == loaded.wte.weight.data_ptr()
    with safe_open(str(model_dir / "model.safetensors"), "pt") as handle:
        assert "lm_head.weight" not in set(handle.keys())
        assert handle.metadata() == {"format": "pt"}


def test_corrupt_file_is_a_one_line_error(tmp_path: Path) -> None:
    _, model_dir = saved(tmp_path)
    (model_dir / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(SolomonError, match="not a readable safetensors file") as info:
        weights.load(model_dir)
    assert "\n" not in str(info.value)


def test_config_that_does_not_fit_the_weights_is_refused(tmp_path: Path) -> None:
    _, model_dir = saved(tmp_path)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps(config | {"n_embd": 32}))
    with pytest.raises(SolomonError, match="does not fit") as info:
        weights.load(model_dir)
    assert "\n" not in str(info.value)


def test_missing_model_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(SolomonError, match=r"is missing: run the train stage"):
        weights.load(tmp_path / "nowhere")
