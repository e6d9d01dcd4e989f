"""Facts with one owner and a derived copy, held equal here: params.yaml and docs/params.md rendered from the
params models, the model params and the model's config, requirements.in and pyproject.toml's dependencies."""

from __future__ import annotations

import dataclasses
import re
import shutil
import tomllib
from pathlib import Path

from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lab import params_files
from solomon.model.gpt import GPTConfig
from solomon.params import ModelParams, Params, flatten, load_params, read_yaml

CONFIG_KEYS = ["vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias"]  # config.json, in order


def test_params_yaml_and_its_docs_page_are_rendered_from_the_models() -> None:
    """Each key's default, bounds and meaning have one owner (solomon/params.py); params.yaml's comments and
    docs/params.md are written from it."""
    assert params_files.stale(ROOT) == [], "run `python -m lab params --write`"


def test_the_committed_params_yaml_holds_the_defaults() -> None:
    assert load_params(ROOT / "params.yaml") == Params()


def test_params_yaml_writes_every_key_but_an_unset_data_card() -> None:
    raw = flatten(read_yaml(ROOT / "params.yaml"))
    every = flatten(Params().model_dump(mode="json"))
    assert sorted(raw) == sorted(key for key in every if not key.startswith("corpus.card."))


def test_rendering_keeps_a_users_values_and_refreshes_only_comments(tmp_path: Path) -> None:
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    (tmp_path / "docs").mkdir()
    text = (ROOT / "params.yaml").read_text(encoding="utf-8").replace("warmup: 200", "warmup: 400")
    text = text.replace("# steps of linear warm-up", "# my own note").replace("card: {}", "card: {license: cc0-1.0}")
    (tmp_path / "params.yaml").write_text(text, encoding="utf-8")
    before = load_params(tmp_path / "params.yaml")
    assert set(params_files.write(tmp_path)) == {"params.yaml", "docs/params.md"}
    assert load_params(tmp_path / "params.yaml") == before  # values kept: warmup 400, the licence
    written = (tmp_path / "params.yaml").read_text(encoding="utf-8")
    assert "warmup: 400" in written and "my own note" not in written and "license: cc0-1.0" in written
    assert params_files.write(tmp_path) == []  # a second render is a no-op


def test_gpt_config_comes_from_the_model_params() -> None:
    options = ["position", "qk_norm", "activation"]  # the architecture options, written only when on
    either = ["value_embeddings", "logit_softcap"]  # options of either family, also written only when on
    assert [field.name for field in dataclasses.fields(GPTConfig)] == [*CONFIG_KEYS, *options, "family", *either]
    sizes = ["n_layer", "n_head", "n_embd", "block_size", "dropout", "bias"]
    assert list(ModelParams.model_fields) == ["family", *sizes, *options, *either]
    default = load_params(ROOT / "params.yaml").model
    resolved = GPTConfig.from_params(default, vocab_size=8192)
    assert GPTConfig(**resolved.to_dict()) == resolved  # config.json gives back the default's model
    # config.json is hashed in the manifest: a GPT-2 model's has the same keys, order and values as before
    # from_params existed
    model = default.model_copy(update={"family": "gpt2", "qk_norm": False, "position": None, "activation": None})
    config = GPTConfig.from_params(model, vocab_size=8192).to_dict()
    assert list(config) == CONFIG_KEYS
    assert config == {"vocab_size": 8192, **model.model_dump(exclude={*options, *either, "family"})}
    rotary = GPTConfig.from_params(model.model_copy(update={"position": "rotary"}), vocab_size=8192).to_dict()
    assert list(rotary) == [*CONFIG_KEYS, "position"] and rotary["position"] == "rotary"


def requirement_keys(lines: list[str]) -> dict[str, str]:
    """name → version specifier, without local version labels (requirements.in's torch is ``+cpu``)."""
    keys = {}
    for line in lines:
        requirement = Requirement(re.sub(r"\+[0-9A-Za-z.]+", "", line.split("#")[0].strip()))
        keys[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return keys


def test_pyproject_dependencies_are_requirements_in_runtime_section() -> None:
    runtime = (ROOT / "requirements.in").read_text(encoding="utf-8").split("# development and test tools")[0]
    lines = [line for line in runtime.splitlines() if line.split("#")[0].strip()]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert requirement_keys(project["dependencies"]) == requirement_keys(lines)
