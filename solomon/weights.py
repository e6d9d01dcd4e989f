"""The trained model on disk: ``model.safetensors`` (weights) beside ``config.json`` (architecture)."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from solomon.atomic import staged_dir, write_json
from solomon.errors import SolomonError
from solomon.model import GPT, GPTConfig

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def save(model: GPT, out_dir: Path) -> None:
    with staged_dir(out_dir) as tmp:
        save_model(model, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        write_json(tmp / CONFIG_FILE, model.config.to_dict())


def load(model_dir: Path) -> GPT:
    try:
        config = GPTConfig(**json.loads((model_dir / CONFIG_FILE).read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise SolomonError(f"{model_dir / CONFIG_FILE} is missing: run the train stage (`dvc repro train`)") from None
    except (TypeError, json.JSONDecodeError) as exc:
        raise SolomonError(f"{model_dir / CONFIG_FILE} is not a valid model config ({exc})") from None
    model = GPT(config)
    try:
        load_model(model, str(model_dir / WEIGHTS_FILE))
    except FileNotFoundError:
        raise SolomonError(f"{model_dir / WEIGHTS_FILE} is missing: run the train stage") from None
    except (SafetensorError, RuntimeError) as exc:
        first = str(exc).splitlines()[0]
        raise SolomonError(f"{model_dir / WEIGHTS_FILE} does not hold this model's weights: {first}") from None
    return model.eval()
