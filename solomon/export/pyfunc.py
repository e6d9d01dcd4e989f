"""MLflow's ``python_function`` flavour of a promoted run: what ``mlflow models serve`` and
``mlflow.pyfunc.load_model`` load, through ``_load_pyfunc`` below.

The model's data is a serving root, laid out as the serving image is (the run directory, the weights, the model
config and the tokenizer at their repository paths), and loading it is ``solomon serve``'s loading: every file is
verified against the run's manifest, and the manifest against the digest the registry recorded at promotion,
before a byte of it is used. A loader module rather than a pickled ``PythonModel``: nothing is unpickled, so
loading a registered version runs no code that was not installed. Prediction samples as ``solomon generate``
does (``serving.generate.Completer``, its engine built once at load): the same seed and settings give the same
text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from solomon.serving.generate import Completer
from solomon.serving.loader import Served, load_verified


class SolomonModel:
    """A verified run's model behind MLflow's pyfunc interface: one prompt a row, one text an answer."""

    def __init__(self, served: Served) -> None:
        self.completer = Completer(served)

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> list[str]:
        params = params or {}
        prompts = list(model_input["prompt"])  # MLflow enforces the signature: a frame with a prompt column
        return [
            self.completer.complete(
                str(prompt),
                params.get("max_tokens"),
                params.get("temperature"),
                params.get("top_k"),
                int(params.get("seed", 0)),
            )
            for prompt in prompts
        ]


def _load_pyfunc(data_path: str, model_config: dict | None = None) -> SolomonModel:
    """MLflow's entry: ``model_config`` (saved in MLmodel) names the run directory inside ``data_path`` and the
    manifest SHA256 it must have; anything that does not verify refuses in one line."""
    config = model_config or {}
    root = Path(data_path)
    served = load_verified(root / config["run_dir"], root, expect_digest=config["manifest_sha256"], dvc_lock=False)
    return SolomonModel(served)
