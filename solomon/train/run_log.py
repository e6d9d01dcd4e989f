"""The training run's logs: a per-step TSV (the DVC plot) and a JSON-lines record of each evaluation with its
sample generations. Rows are appended and flushed as they happen; on resume both are cut back to the
checkpoint's step, so the finished logs have no duplicated and no missing steps."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from solomon.atomic import write_text

STEP_COLUMNS = ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s")
# tokens_per_s is measured from the wall clock; every other column is a deterministic function of the run.
DETERMINISTIC_COLUMNS = STEP_COLUMNS[:-1]


def _format(value) -> str:
    return f"{value:.9g}" if isinstance(value, float) else str(value)


class RunLog:
    def __init__(self, steps_path: Path, evals_path: Path) -> None:
        self.steps_path = steps_path
        self.evals_path = evals_path

    def start(self, resume_step: int) -> None:
        """Keep the rows of steps ≤ ``resume_step`` (none for a fresh run) and open both logs for appending."""
        header = "\t".join(STEP_COLUMNS) + "\n"
        kept_steps = [header]
        kept_evals: list[str] = []
        if resume_step > 0:
            kept_steps += [line for line in self._lines(self.steps_path)[1:] if int(line.split("\t")[0]) <= resume_step]
            kept_evals = [line for line in self._lines(self.evals_path) if json.loads(line)["step"] <= resume_step]
        write_text(self.steps_path, "".join(kept_steps))
        write_text(self.evals_path, "".join(kept_evals))
        self._steps = open(self.steps_path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - open for the run
        self._evals = open(self.evals_path, "a", encoding="utf-8", newline="")  # noqa: SIM115

    @staticmethod
    def _lines(path: Path) -> list[str]:
        if not path.exists():
            return []
        # A kill mid-write can leave a last line without its newline: drop it, its step will be rerun.
        return [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.endswith("\n")]

    def step(self, row: dict) -> None:
        self._steps.write("\t".join(_format(row[c]) for c in STEP_COLUMNS) + "\n")
        self._steps.flush()

    def evaluation(self, record: dict) -> None:
        self._evals.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
        self._evals.flush()

    def close(self) -> None:
        self._steps.close()
        self._evals.close()


def read_steps(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle, delimiter="\t")]


def read_evals(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
