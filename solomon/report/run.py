"""Write ``reports/training/<run-id>/``: the hyperparameter record, the data card, metrics, the training log,
loss and LR curves in Markdown and HTML.

The run id is the training run's (made when training started, kept through resumes), so a run directory belongs
to one training run: rebuilding its report replaces that directory whole, atomically, and never touches another
run's."""

from __future__ import annotations

import json
import platform
import shutil
from datetime import UTC, datetime
from pathlib import Path

import torch

import solomon
from solomon.atomic import staged_dir, write_json, write_text
from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.params import Params
from solomon.provenance import git_state
from solomon.report import charts, document
from solomon.train.run_log import read_evals, read_steps


def _one_line(text: str) -> str:
    """Generated text in a table cell: newlines shown as ⏎, pipes escaped for Markdown tables."""
    return text.replace("\n", " ⏎ ").replace("|", "\\|")


def create_run(
    params: Params,
    params_path: Path,
    files: dict[str, Path],
    root: Path,
    latest_path: Path,
    now: datetime | None = None,
) -> Path:
    """``files`` names the inputs: metrics, train_metrics, train_log, train_evals, datacard_md, datacard_json,
    model, tokenizer."""
    now = now or datetime.now(UTC)
    hashes = {name: sha256_file(path) for name, path in sorted(files.items())}
    hashes["params"] = sha256_file(params_path)
    metrics = json.loads(files["metrics"].read_text(encoding="utf-8"))
    train_metrics = json.loads(files["train_metrics"].read_text(encoding="utf-8"))
    run_id = train_metrics.get("run_id")
    if not run_id:
        raise SolomonError(
            f"{files['train_metrics']} names no run_id (written by an older Solomon): rerun training with "
            "`dvc repro --force train`"
        )
    rows = read_steps(files["train_log"])
    evals = read_evals(files["train_evals"])
    run_info = {
        "run_id": run_id,
        "created_utc": now.isoformat(timespec="seconds"),
        "git": git_state(),
        "versions": {"solomon": solomon.__version__, "python": platform.python_version(), "torch": torch.__version__},
        "sha256": hashes,
    }
    target = root / run_id
    with staged_dir(target) as tmp:
        shutil.copyfile(params_path, tmp / "params.yaml")
        write_json(tmp / "hyperparameters.json", params.model_dump(mode="json"))
        for name in ("metrics", "train_metrics", "train_log", "train_evals"):
            shutil.copyfile(files[name], tmp / files[name].name)
        shutil.copyfile(files["datacard_md"], tmp / "datacard.md")
        shutil.copyfile(files["datacard_json"], tmp / "datacard.json")
        write_json(tmp / "run.json", run_info)
        svgs = charts.render(rows, tmp)
        title = f"Training run {run_id}"
        intro = [
            f"Created {run_info['created_utc']} from git commit {run_info['git']['commit'] or 'unknown'}"
            + (" (uncommitted changes)" if run_info["git"]["dirty"] else "")
            + ". MLflow: the run tagged solomon.run_id = this run id.",
            f"Corpus: {params.corpus.source}; data card: datacard.md. Hyperparameters: params.yaml, "
            "hyperparameters.json.",
        ]
        tables = {
            "Held-out metrics": document.metrics_table(metrics),
            "Training": document.key_value_table(train_metrics),
            "Evaluations during training (fixed validation subset)": (
                ["step", "val loss", "val perplexity", "val bits/byte", "new best"],
                [
                    [e["step"], e["val_loss"], e["val_perplexity"], e["val_bits_per_byte"], "yes" if e["best"] else ""]
                    for e in evals
                ],
            ),
            "Samples at each evaluation": (
                ["step", "prompt", "completion"],
                [[e["step"], s["prompt"], _one_line(s["completion"])] for e in evals for s in e["samples"]],
            ),
            "Hyperparameters": document.key_value_table(params.model_dump(mode="json")),
            "Inputs (SHA256)": (["file", "sha256"], [[k, v] for k, v in hashes.items()]),
        }
        write_text(tmp / "report.md", document.render_markdown(title, intro, tables, list(svgs)))
        write_text(tmp / "report.html", document.render_html(title, intro, tables, svgs))
    write_json(latest_path, {"run_id": run_id, "path": (root / run_id).as_posix()})
    return target
