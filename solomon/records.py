"""The run's records: the one owner of every file name and log format that the pipeline, the audit chain,
tracking and the tools share.

Three kinds of fact live here and nowhere else:
- where the pipeline's outputs sit in the workspace (repository-relative, as dvc.yaml and the manifest name
  them), and ``reports/latest.json``, the pointer to the newest run;
- the run directory ``<report.root>/<run-id>/``: the name of each file and the role it plays in the manifest;
- the step log (TSV) and evaluation log (JSON lines): their columns, how a row is written and how it is read.

Everything here is plain data and small readers: it imports nothing of Solomon's, so every floor may use it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

# --- the workspace: pipeline outputs, repository-relative ------------------------------------------------------
MODEL_DIR = "models"
WEIGHTS_FILE = "model.safetensors"  # inside a model directory
CONFIG_FILE = "config.json"  # inside a model directory
WEIGHTS = f"{MODEL_DIR}/{WEIGHTS_FILE}"
MODEL_CONFIG = f"{MODEL_DIR}/{CONFIG_FILE}"
PARAMS_FILE = "params.yaml"  # at the repository root
DVC_LOCK = "dvc.lock"
DVC_YAML = "dvc.yaml"  # the pipeline: its stages, their commands, deps, params and outputs
CHECKED_DIR = "data/checked"  # the check stage's output: <stage>.json, the validated params each later stage reads
REPORTS_DIR = "reports"
TOKENIZER = "data/tokenizer.json"
TOKENS_DIR = "data/tokens"
CORPUS_DIR = "data/corpus"
DATACARD_MD = "data/datacard.md"
DATACARD_JSON = "data/datacard.json"
CHECKPOINTS_DIR = "checkpoints"
# The run's replay anchors (a train output, DVC-tracked): its last two checkpoints and their index, manifest
# subjects of this role, so `dvc push`/`dvc pull` move them with the model and `solomon replay` finds them.
ANCHORS_DIR = "anchors"
ANCHOR_ROLE = "replay-anchor"
METRICS = "metrics.json"  # held-out metrics of the evaluate stage
STEP_LOG = f"{REPORTS_DIR}/train_log.tsv"
EVAL_LOG = f"{REPORTS_DIR}/train_evals.jsonl"
VAL_LOSS_FILE = "train_val_loss.tsv"  # beside the evaluation log: its losses as a table DVC can plot (not JSON lines)
VAL_LOSS_LOG = f"{REPORTS_DIR}/{VAL_LOSS_FILE}"
SYSTEM_FILE = "train_system.tsv"  # beside the step log: the machine and the process as training went (not a result)
SYSTEM_LOG = f"{REPORTS_DIR}/{SYSTEM_FILE}"
TRAIN_METRICS = f"{REPORTS_DIR}/train_metrics.json"  # training results: a DVC metric
# How the training run ran: timings, throughput, environment, run id. Not a metric (they differ between identical
# runs), so `dvc exp show`, `dvc metrics diff` and the review note show results only.
TRAIN_RUN = f"{REPORTS_DIR}/train_run.json"
RELIABILITY_DIR = f"{REPORTS_DIR}/reliability"
LATEST = f"{REPORTS_DIR}/latest.json"
SPLITS = ("val", "test")  # the held-out splits
CALIBRATION = "calibration"  # metrics.json's section beside the splits: the temperature fitted on val, test with it
TASKS = "tasks"  # metrics.json's section of benchmark scores (lm-eval), one entry per task
TASK_DATA_DIR = "data/tasks"  # the built-in tasks' data, made from the test split by the evaluate stage
# A sample of each task's scored requests (token ids and the log-likelihood each earned): `solomon score` replays it
TASK_REQUESTS = f"{REPORTS_DIR}/task_requests.jsonl"

MODEL_FILES = (WEIGHTS, MODEL_CONFIG)  # what the registry version stands for
SERVING_FILES = (WEIGHTS, MODEL_CONFIG, TOKENIZER)  # what a server or `solomon generate` loads


def checked_params_path(stage: str) -> str:
    return f"{CHECKED_DIR}/{stage}.json"


def reliability_path(split: str) -> str:
    return f"{RELIABILITY_DIR}/{split}.json"


# --- the run directory <report.root>/<run-id>/ -------------------------------------------------------------------
class RunFiles:
    """File names inside a run directory."""

    MANIFEST = "manifest.json"
    PAGES = ("index.html", "README.md")  # show the manifest digest, so they cannot be its subjects
    PROMOTION = "promotion.json"  # written later by `solomon promote`, kept (with its signature) when rebuilt
    PROMOTION_SIGNATURE = "promotion.json.sig"  # written by `solomon sign` once the run is promoted
    SIGNATURE = "manifest.sig"
    RUN_INFO = "run.json"
    HYPERPARAMETERS = "hyperparameters.yaml"  # every value, defaults included
    PARAMS = PARAMS_FILE  # params.yaml as written
    METRICS = "metrics.json"
    TRAIN_METRICS = "train_metrics.json"
    TRAIN_RUN = "train_run.json"
    STEP_LOG = "train_log.tsv"
    EVAL_LOG = "train_evals.jsonl"
    SYSTEM_LOG = SYSTEM_FILE
    DATACARD_MD = "datacard.md"
    DATACARD_JSON = "datacard.json"
    TASK_REQUESTS = "task_requests.jsonl"

    @staticmethod
    def task_config(task: str) -> str:
        """The run directory's copy of a scored task's YAML file."""
        return f"task_{task}.yaml"

    @staticmethod
    def reliability(split: str) -> str:
        return f"reliability_{split}.json"


# The run directory's copies of the report stage's inputs: input name -> (workspace path, name in the run dir).
RECORD_FILES = {
    "metrics": (METRICS, RunFiles.METRICS),
    "train_metrics": (TRAIN_METRICS, RunFiles.TRAIN_METRICS),
    "train_run": (TRAIN_RUN, RunFiles.TRAIN_RUN),
    "train_log": (STEP_LOG, RunFiles.STEP_LOG),
    "train_evals": (EVAL_LOG, RunFiles.EVAL_LOG),
    "train_system": (SYSTEM_LOG, RunFiles.SYSTEM_LOG),
    "datacard_md": (DATACARD_MD, RunFiles.DATACARD_MD),
    "datacard_json": (DATACARD_JSON, RunFiles.DATACARD_JSON),
    **{f"reliability_{split}": (reliability_path(split), RunFiles.reliability(split)) for split in SPLITS},
    "task_requests": (TASK_REQUESTS, RunFiles.TASK_REQUESTS),
}

# The role each run-directory file plays in the manifest (any other file, e.g. a chart, is a "report").
RUN_FILE_ROLES = {
    RunFiles.METRICS: "metrics",
    RunFiles.TRAIN_METRICS: "metrics",
    **{RunFiles.reliability(split): "metrics" for split in SPLITS},
    RunFiles.HYPERPARAMETERS: "hyperparameters",
    RunFiles.PARAMS: "hyperparameters",
    RunFiles.DATACARD_MD: "datacard",
    RunFiles.DATACARD_JSON: "datacard",
    RunFiles.RUN_INFO: "provenance",
    RunFiles.TRAIN_RUN: "provenance",
    RunFiles.STEP_LOG: "training-log",
    RunFiles.EVAL_LOG: "training-log",
    RunFiles.SYSTEM_LOG: "training-log",
    RunFiles.TASK_REQUESTS: "metrics",
}
TASK_CONFIG_ROLE = "task-config"  # a run directory's task_<name>.yaml
TASK_DATA_ROLE = "task-data"  # a data file a scored task read (a workspace subject)


def run_file_role(name: str) -> str:
    """The manifest role of a run directory's file ``name`` (a chart or any other file: "report")."""
    if name.startswith("task_") and name.endswith(".yaml"):
        return TASK_CONFIG_ROLE
    return RUN_FILE_ROLES.get(name, "report")


def read_reliability(run_dir: Path) -> dict[str, list[dict]] | None:
    """{split: bins} of a run's reliability diagram; None for a run evaluated before calibration existed."""
    paths = {split: run_dir / RunFiles.reliability(split) for split in SPLITS}
    if not all(path.is_file() for path in paths.values()):
        return None
    return {split: json.loads(path.read_text(encoding="utf-8")) for split, path in paths.items()}


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# --- reports/latest.json ------------------------------------------------------------------------------------------
def latest_record(run_id: str, runs_root: str | Path) -> dict:
    """What ``reports/latest.json`` holds: the newest run's id and its directory, repository-relative."""
    return {"run_id": run_id, "path": (Path(runs_root) / run_id).as_posix()}


def read_latest(repo: Path) -> dict | None:
    """``reports/latest.json`` of the repository ``repo``; None before the first run."""
    path = repo / LATEST
    return read_json(path) if path.is_file() else None


# --- the step log (TSV) and the evaluation log (JSON lines) --------------------------------------------------------
STEP_COLUMNS = ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s")
# tokens_per_s is measured from the wall clock; every other column is a deterministic function of the run.
DETERMINISTIC_COLUMNS = STEP_COLUMNS[:-1]
STEP_HEADER = "\t".join(STEP_COLUMNS) + "\n"
VAL_LOSS_COLUMNS = ("step", "val_loss")
VAL_LOSS_HEADER = "\t".join(VAL_LOSS_COLUMNS) + "\n"
# The system log: a sample's step and UTC time, then MLflow's system-metric names (solomon.train.system_metrics).
SYSTEM_COLUMNS = (
    "step", "utc", "cpu_utilization_percentage", "system_memory_usage_megabytes", "system_memory_usage_percentage",
    "process_cpu_utilization_percentage", "process_rss_megabytes", "process_peak_rss_megabytes",
    "disk_usage_percentage", "disk_usage_megabytes", "disk_available_megabytes", "network_receive_megabytes",
    "network_transmit_megabytes",
)  # fmt: skip
SYSTEM_HEADER = "\t".join(SYSTEM_COLUMNS) + "\n"


FLOAT_FORMAT = ".9g"  # 9 significant digits: a float32 (loss, gradient norm) written and read back exactly


def step_line(row: dict) -> str:
    return (
        "\t".join(f"{row[c]:{FLOAT_FORMAT}}" if isinstance(row[c], float) else str(row[c]) for c in STEP_COLUMNS) + "\n"
    )


def as_logged(value: float) -> float:
    """A step-log value as ``read_steps`` gives it back: two values log alike exactly when these are equal."""
    return float(f"{value:{FLOAT_FORMAT}}")


def val_loss_line(record: dict) -> str:
    """An evaluation's row of the validation-loss table (the same digits as ``eval_line`` writes)."""
    return f"{record['step']}\t{json.dumps(record['val_loss'])}\n"


def system_line(row: dict) -> str:
    return "\t".join(str(row[c]) for c in SYSTEM_COLUMNS) + "\n"


def read_system(path: Path) -> list[dict]:
    """The system log's rows: step as an int, utc as text, every measure a float."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return [{k: int(v) if k == "step" else v if k == "utc" else float(v) for k, v in row.items()} for row in rows]


def eval_line(record: dict) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"


def read_steps(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle, delimiter="\t")]


def read_evals(path: Path) -> list[dict]:
    """JSON Lines: records end at "\n" only (generated text may hold U+2028 or U+0085, which ``splitlines``
    would also break at)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
