"""The trained model on disk: ``model.safetensors`` (weights) beside ``config.json`` (architecture).

The tied output projection (``lm_head.weight``) is the input embedding, so it is stored once, as
``wte.weight``. Tensors are written in sorted order with one fixed metadata entry: the same weights always
give the same file bytes (safetensors' own ``save_model`` orders its shared-tensor metadata by hash, which
changes from process to process).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from solomon.atomic import staged_dir, write_json
from solomon.errors import SolomonError
from solomon.model.gpt import GPT, GPTConfig

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TIED = "lm_head.weight"


def save(model: GPT, out_dir: Path, crash_point: Callable[[str], None] = lambda stage: None) -> None:
    """Write the model directory atomically (``crash_point``: see ``solomon.atomic.staged_dir``)."""
    state = {name: tensor.contiguous() for name, tensor in sorted(model.state_dict().items()) if name != TIED}
    with staged_dir(out_dir, crash_point) as tmp:
        save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        write_json(tmp / CONFIG_FILE, model.config.to_dict())


def load(model_dir: Path) -> GPT:
    return load_files(model_dir / CONFIG_FILE, model_dir / WEIGHTS_FILE)


def load_files(config_path: Path, weights_path: Path) -> GPT:
    try:
        config = GPTConfig(**json.loads(config_path.read_text(encoding="utf-8")))
        state = load_file(str(weights_path))
    except FileNotFoundError as exc:
        raise SolomonError(f"{exc.filename} is missing: run the train stage (`dvc repro train`)") from None
    except (TypeError, ValueError) as exc:  # JSONDecodeError is a ValueError; GPTConfig refuses bad values
        raise SolomonError(f"{config_path} is not a valid model config ({exc})") from None
    except SafetensorError as exc:
        raise SolomonError(f"{weights_path} is not a readable safetensors file ({exc})") from None
    model = GPT(config)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        first = str(exc).splitlines()[1].strip() if "\n" in str(exc) else str(exc)
        raise SolomonError(f"{weights_path} does not fit {config_path}: {first}") from None
    if missing != [TIED] or unexpected:
        raise SolomonError(
            f"{weights_path} does not fit {config_path}: missing {[m for m in missing if m != TIED]}, "
            f"unexpected {unexpected}"
        )
    return model.eval()
