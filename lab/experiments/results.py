"""A page's data: the files the runner keeps of each run and the renderer draws from, and what they tell.

``docs/<page>/data/<run>/`` holds the run's records under their run-directory names (metrics.json,
train_metrics.json, train_run.json, train_log.tsv, train_evals.jsonl, reliability_{val,test}.json, the params.yaml
it ran with) and measured.json (command, wall seconds, peak RSS); ``docs/<page>/data/exp_show.md`` holds
`dvc exp show` after the runs, with the command that printed it (exp_show.command). Data made before
train_run.json existed has none: its train_metrics.json held both, and is read as both.
"""

from __future__ import annotations

from pathlib import Path

from lab.experiments.spec import nest, run_settings
from lab.scratch import merge
from solomon.errors import SolomonError
from solomon.params import Params, flatten, read_yaml, with_before_values, with_family_defaults
from solomon.records import PARAMS_FILE, RECORD_FILES, RunFiles, read_evals, read_json, read_reliability, read_steps
from solomon.train.precision import resolve

# The best ISAs of a machine kind (``solomon.machine.kind``) whose CPUs run bf16 matmuls natively for certain.
NATIVE_BF16_ISAS = ("amx_bf16", "avx512_bf16")
THEN_LOG = "then.log"
MEASURED = "measured.json"  # a run's command, wall seconds, peak RSS (and model SHA256)
EXP_SHOW_TABLE, EXP_SHOW_COMMAND = "exp_show.md", "exp_show.command"  # the table, and the command that printed it
# The files of a run the page is drawn from: workspace path → name in the run's data directory (as in a run
# directory). All of the run's records but the data card, which is the same for every run of a page.
# And the params.yaml it ran with (as DVC wrote it for the run), so that a page whose runs no longer follow from the
# current params.yaml is caught (`stale_runs`), not silently shown.
RESULT_FILES = dict(files for name, files in RECORD_FILES.items() if name not in ("datacard_md", "datacard_json"))
RESULT_FILES[PARAMS_FILE] = RunFiles.PARAMS


def data_dir(docs_dir: Path, page: str) -> Path:
    return docs_dir / page / "data"


def read_results(data: Path, runs: list[str]) -> dict[str, dict]:
    """{run: {metrics, train_metrics, train_run, measured, steps, evals, reliability, params}} from a page's data
    directory (params: the params.yaml it ran with, nested; None for data made before the runner kept it)."""
    results = {}
    for run in runs:
        folder = data / run
        if not folder.is_dir():
            raise SolomonError(f"no results for run {run} in {data}: run `python -m lab docs run {data.parent.name}`")
        results[run] = {
            "metrics": read_json(folder / RunFiles.METRICS),
            "train_metrics": read_json(folder / RunFiles.TRAIN_METRICS),
            "train_run": read_json(folder / RunFiles.TRAIN_RUN)
            if (folder / RunFiles.TRAIN_RUN).is_file()
            else read_json(folder / RunFiles.TRAIN_METRICS),  # the combined file of older data
            "measured": read_json(folder / MEASURED),
            "steps": read_steps(folder / RunFiles.STEP_LOG),
            "evals": read_evals(folder / RunFiles.EVAL_LOG),
            "reliability": read_reliability(folder),
            "params": read_yaml(folder / RunFiles.PARAMS) if (folder / RunFiles.PARAMS).is_file() else None,
        }
    return results


def _resolved(params: dict) -> dict:
    """``params`` with the model's null options as the family's values: what a run records and builds."""
    return params | {"model": with_family_defaults(params.get("model") or {})}


def computed_precision(setting: str, portable: bool, train_run: dict | None) -> str:
    """What a ``train.precision`` of ``setting`` computes in on the host of the run ``train_run`` records: ``auto``
    as that host resolves it (native bf16 matmuls where every kind that trained it names a bf16 ISA), so a run
    recorded as bf16 on such a host is the same recipe as today's ``auto``."""
    if setting != "auto":
        return setting
    kinds = [span["kind"] for span in (train_run or {}).get("machine_kinds") or []]
    native = bool(kinds) and all(any(isa in kind for isa in NATIVE_BF16_ISAS) for kind in kinds)
    return resolve(setting, portable, {"bf16_matmul": "native" if native else "fallback"})


def stale_runs(spec: dict, page: str, docs_dir: Path, params: dict) -> list[str]:
    """One line per run of the page whose recorded params.yaml is not what its command gives on ``params`` (the
    current params.yaml, nested) — its numbers are from another recipe — naming the first differing keys. A key
    the record lacks is a param added since; at what the code did before it existed it is no difference: its
    declared default, or its ``before`` value where the default has moved since (solomon/params.py)."""
    stale = []
    declared = flatten(Params().model_dump(mode="json"), "")  # a moved default's key is read at its before value
    for run, settings in run_settings(spec, page, flatten(params, "params")).items():
        recorded_path = data_dir(docs_dir, page) / run / RunFiles.PARAMS
        if not recorded_path.is_file():
            stale.append(f"{page}/{run}: no record of the params it ran with (made before the runner kept them)")
            continue
        recorded = flatten(_resolved(with_before_values(read_yaml(recorded_path))), "")
        expected = flatten(_resolved(merge(params, nest(settings))), "")
        train_run_path = recorded_path.with_name(RunFiles.TRAIN_RUN)
        train_run = read_json(train_run_path) if train_run_path.is_file() else None
        for flat in (recorded, expected):  # a precision compares as what it computed in on the run's host
            if "train.precision" in flat:
                flat["train.precision"] = computed_precision(
                    flat["train.precision"], bool(flat.get("train.portable")), train_run
                )
        differing = [
            f"{key} ran {recorded.get(key, '(unset)')!r}, now {expected.get(key, '(unset)')!r}"
            for key in sorted(recorded.keys() | expected.keys())
            if recorded.get(key) != expected.get(key)
            and not (key not in recorded and key in declared and expected.get(key) == declared[key])
        ]
        if differing:
            stale.append(f"{page}/{run}: " + "; ".join(differing[:3]) + ("; …" if len(differing) > 3 else ""))
    return stale
