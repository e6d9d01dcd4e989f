"""Facts stated in two places are held equal here, so that they cannot drift: params.yaml and the validators'
defaults, the model params and the model's config, requirements.in and pyproject.toml's dependencies."""

from __future__ import annotations

import dataclasses
import re
import tomllib

import yaml
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from solomon.model.gpt import GPTConfig
from solomon.params import ModelParams, Params, flatten, load_params

# Keys params.yaml may leave out: a user corpus's data-card fields (all None, the KJV's card is built in).
UNWRITTEN = ("corpus.card.",)
CONFIG_KEYS = ["vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias"]  # config.json, in order


def default_params() -> Params:
    """Every validator default; corpus.kjv_sha256 has none (the pinned hash lives in params.yaml only)."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    return Params.model_validate({"corpus": {"kjv_sha256": raw["corpus"]["kjv_sha256"]}})


def test_validator_defaults_are_params_yaml() -> None:
    defaults = flatten(default_params().model_dump(mode="json"))
    written = flatten(load_params(ROOT / "params.yaml").model_dump(mode="json"))
    assert set(defaults) == set(written)
    drifted = {key: (defaults[key], written[key]) for key in written if defaults[key] != written[key]}
    assert not drifted, f"validator default vs params.yaml: {drifted}"


def test_params_yaml_writes_every_key() -> None:
    raw = flatten(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8")))
    every = flatten(default_params().model_dump(mode="json"))
    assert sorted(raw) == sorted(key for key in every if not key.startswith(UNWRITTEN))


def test_gpt_config_comes_from_the_model_params() -> None:
    assert [field.name for field in dataclasses.fields(GPTConfig)] == CONFIG_KEYS
    assert list(ModelParams.model_fields) == ["n_layer", "n_head", "n_embd", "block_size", "dropout", "bias"]
    model = load_params(ROOT / "params.yaml").model
    config = GPTConfig.from_params(model, vocab_size=8192).to_dict()
    # config.json is hashed in the manifest: the same keys, order and values as before from_params existed
    assert list(config) == CONFIG_KEYS
    assert config == {"vocab_size": 8192, **model.model_dump()}


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
