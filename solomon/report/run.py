"""Write ``<report.root>/<run-id>/``: the hyperparameter record, the data card, metrics, the training log,
curves, ``README.md`` and a self-contained ``index.html``, and ``manifest.json`` (the SHA256 manifest).

The run id is the training run's (made when training started, kept through resumes), so a run directory belongs
to one training run: rebuilding its report replaces that directory whole, atomically, and never touches another
run's."""

from __future__ import annotations

import platform
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
import yaml

import solomon
from solomon.atomic import staged_dir, write_bytes, write_json, write_text
from solomon.audit import manifest
from solomon.errors import SolomonError
from solomon.git_origin import git_state, uncommitted_note
from solomon.hashing import sha256_file
from solomon.params import Params, read_yaml
from solomon.records import (
    RECORD_FILES,
    TASKS,
    RunFiles,
    latest_record,
    read_evals,
    read_json,
    read_reliability,
    read_steps,
    read_system,
)
from solomon.report import charts, document
from solomon.rng import STREAMS, stream_seed


def _one_line(text: str) -> str:
    """Generated text in a table cell: newlines shown as ⏎, pipes escaped for Markdown tables."""
    return text.replace("\n", " ⏎ ").replace("|", "\\|")


@dataclass(frozen=True)
class Provenance:
    """What the manifest needs beyond the report's own inputs: where the workspace is, the raw corpus files,
    the lock files, and the MLflow run (None when tracking is off or unreachable)."""

    repo_root: Path
    corpus_files: list[tuple[str, Path]]
    dvc_lock: Path
    requirements_lock: Path
    mlflow_run: str | None


def _predicate(params: Params, run_info: dict, provenance: Provenance, now: datetime) -> dict:
    started = datetime.strptime(run_info["run_id"].split("-")[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return {
        "run_id": run_info["run_id"],
        "git": run_info["git"],
        "dvc": {
            "lock_sha256": sha256_file(provenance.dvc_lock),
            "stages": manifest.dvc_stages(provenance.dvc_lock),
        },
        "requirements_lock_sha256": sha256_file(provenance.requirements_lock),
        "environment": manifest.environment(params.train.threads, params.eval.threads),
        "seeds": {"train.seed": params.train.seed}
        | {f"stream.{s}": stream_seed(params.train.seed, s) for s in STREAMS},
        "corpus": {"source": params.corpus.source, "split_salt": params.corpus.split.salt},
        "mlflow": {"run_id": provenance.mlflow_run, "run_tag": f"solomon.run_id={run_info['run_id']}"},
        "times": {"training_started_utc": started.isoformat(), "reported_utc": now.isoformat(timespec="seconds")},
    }


def create_run(
    params: Params,
    params_path: Path,
    files: dict[str, Path],
    root: Path,
    latest_path: Path,
    provenance: Provenance,
    now: datetime | None = None,
) -> Path:
    """``files`` names the inputs: those of ``records.RECORD_FILES`` (copied into the run directory), model and
    tokenizer. ``root`` is where runs live (report.root); ``latest_path`` gets the pointer to this run."""
    now = now or datetime.now(UTC)
    hashes = {name: sha256_file(path) for name, path in sorted(files.items())}
    hashes["params"] = sha256_file(params_path)
    run_id = read_json(files["train_run"]).get("run_id")
    if not run_id:
        raise SolomonError(
            f"{files['train_run']} names no run_id (written by an older Solomon): rerun training with "
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
    hyperparameters = params.model_dump(mode="json")
    target = root / run_id
    with staged_dir(target) as tmp:
        for kept in (RunFiles.PROMOTION, RunFiles.PROMOTION_SIGNATURE):  # the promotion record outlives a rebuild
            if (target / kept).is_file():
                shutil.copyfile(target / kept, tmp / kept)
        shutil.copyfile(params_path, tmp / RunFiles.PARAMS)
        write_text(tmp / RunFiles.HYPERPARAMETERS, yaml.safe_dump(hyperparameters, sort_keys=False, allow_unicode=True))
        for name, (_, copy) in RECORD_FILES.items():
            shutil.copyfile(files[name], tmp / copy)
        write_json(tmp / RunFiles.RUN_INFO, run_info)
        charts.write_pngs(
            rows, evals, tmp, hyperparameters, read_reliability(tmp), read_system(tmp / RunFiles.SYSTEM_LOG)
        )

        tasks = read_json(tmp / RunFiles.METRICS).get(TASKS, {})
        copy_task_files(provenance.repo_root, tasks, tmp)
        subjects = manifest.workspace_subjects(provenance.repo_root, provenance.corpus_files)
        subjects += manifest.task_data_subjects(provenance.repo_root, tasks)
        statement = manifest.build(subjects + manifest.run_subjects(tmp), _predicate(params, run_info, provenance, now))
        write_bytes(tmp / RunFiles.MANIFEST, manifest.encode(statement))

        render_pages(tmp)
    write_json(latest_path, latest_record(run_id, root))
    return target


def copy_task_files(root: Path, tasks: dict, run_dir: Path) -> None:
    """Each scored task's YAML into the run directory, as scored: a task file edited since the evaluate stage ran
    is refused (its scores are not this file's), as is a data file."""
    for name, section in tasks.items():
        source = root / section["task_file"]
        recorded = {section["task_file"]: section["task_sha256"], **section.get("data_sha256", {})}
        for path, digest in recorded.items():
            if not (root / path).is_file() or sha256_file(root / path) != digest:
                raise SolomonError(
                    f"{path}: not the file task {name} was scored with (changed or gone since the evaluate stage): "
                    "rerun it with `dvc repro evaluate`"
                )
        shutil.copyfile(source, run_dir / RunFiles.task_config(name))


def system_table(system: list[dict]) -> tuple[list[str], list[list]]:
    """Each measure of the system log over the run: its mean, its highest and its last value (for the network,
    the last is the total since training started)."""
    measures = [name for name in system[0] if name not in ("step", "utc")]
    first, last = system[0], system[-1]
    span = f"{first['utc']} to {last['utc']}, {len(system)} samples at steps {first['step']}–{last['step']}"
    rows = [[name, round(sum(r[name] for r in system) / len(system), 1), max(r[name] for r in system), last[name]]
            for name in measures]  # fmt: skip
    return ["measure (" + span + ")", "mean", "highest", "last"], rows


def render_pages(run_dir: Path) -> None:
    """Write ``README.md`` and ``index.html`` from the run directory's own files (and nothing else), so the
    pages of any run can be rebuilt at any time without retraining. They show the manifest digest and are the
    only files outside the manifest."""
    statement, encoded = manifest.read(run_dir)
    digest = manifest.digest_of(encoded)
    predicate = statement["predicate"]
    run_info = read_json(run_dir / RunFiles.RUN_INFO)
    metrics = read_json(run_dir / RunFiles.METRICS)
    train_metrics = read_json(run_dir / RunFiles.TRAIN_METRICS)
    # Runs reported before the split kept timings and environment in train_metrics.json: no train_run.json.
    train_run = read_json(run_dir / RunFiles.TRAIN_RUN) if (run_dir / RunFiles.TRAIN_RUN).is_file() else {}
    hyperparameters = read_yaml(run_dir / RunFiles.HYPERPARAMETERS)
    rows = read_steps(run_dir / RunFiles.STEP_LOG)
    evals = read_evals(run_dir / RunFiles.EVAL_LOG)
    # Runs reported before the system log have none.
    system = read_system(run_dir / RunFiles.SYSTEM_LOG) if (run_dir / RunFiles.SYSTEM_LOG).is_file() else []
    run_id = run_info["run_id"]
    title = f"Training run {run_id}"
    intro = [
        f"Manifest SHA256 (the run's identity; `solomon verify` checks it): {digest}",
        f"Created {run_info['created_utc']} from git commit {run_info['git']['commit'] or 'unknown'}"
        + uncommitted_note(run_info["git"])
        + f". MLflow run {predicate['mlflow']['run_id'] or '(not logged)'}, tagged solomon.run_id = {run_id}.",
        f"Corpus: {hyperparameters['corpus']['source']}; data card: {RunFiles.DATACARD_MD}. Hyperparameters: "
        f"{RunFiles.HYPERPARAMETERS} (every value, defaults included) and {RunFiles.PARAMS} (as written).",
    ]
    reliability = read_reliability(run_dir)
    tables = {
        "Held-out metrics": document.metrics_table(metrics),
        **document.calibration_tables(metrics, reliability),
        **document.task_tables(metrics),
        "Training": document.key_value_table(train_metrics),
        **({"How the training ran": document.key_value_table(train_run)} if train_run else {}),
        **({f"The machine during training ({RunFiles.SYSTEM_LOG})": system_table(system)} if system else {}),
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
        "Hyperparameters": document.key_value_table(hyperparameters),
        "Environment": document.key_value_table(predicate["environment"]),
        "Artifacts (manifest subjects)": (
            ["name", "role", "bytes", "sha256"],
            [
                [s["name"], s["annotations"]["role"], s["annotations"]["size"], s["digest"]["sha256"]]
                for s in statement["subject"]
            ],
        ),
    }
    svgs = charts.svgs(rows, evals, hyperparameters, reliability, system)
    datacard = (run_dir / RunFiles.DATACARD_MD).read_text(encoding="utf-8")
    html_page, markdown_page = RunFiles.PAGES
    write_text(run_dir / markdown_page, document.render_markdown(title, intro, tables, list(svgs)))
    write_text(run_dir / html_page, document.render_html(title, intro, tables, svgs, datacard))
