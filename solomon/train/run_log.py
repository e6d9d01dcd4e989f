"""The training run's logs: a per-step TSV (the DVC plot) and a JSON-lines record of each evaluation with its
sample generations. Rows are appended and flushed as they happen, and the rows so far are part of every
checkpoint: a resume rewrites both files from the checkpoint (DVC deletes a stage's outputs before rerunning
it), so the finished logs have no duplicated and no missing steps."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from solomon.atomic import write_text

STEP_COLUMNS = ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s")
# tokens_per_s is measured from the wall clock; every other column is a deterministic function of the run.
DETERMINISTIC_COLUMNS = STEP_COLUMNS[:-1]


def _step_line(row: dict) -> str:
    return "\t".join(f"{row[c]:.9g}" if isinstance(row[c], float) else str(row[c]) for c in STEP_COLUMNS) + "\n"


def _eval_line(record: dict) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"


class RunLog:
    def __init__(self, steps_path: Path, evals_path: Path) -> None:
        self.steps_path = steps_path
        self.evals_path = evals_path
        self.steps: list[dict] = []
        self.evals: list[dict] = []

    def open(self) -> None:
        """Write the rows held so far (none for a fresh run), then keep both files open for appending."""
        write_text(self.steps_path, "\t".join(STEP_COLUMNS) + "\n" + "".join(map(_step_line, self.steps)))
        write_text(self.evals_path, "".join(map(_eval_line, self.evals)))
        self._steps_file = open(self.steps_path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        self._evals_file = open(self.evals_path, "a", encoding="utf-8", newline="")  # noqa: SIM115

    def step(self, row: dict) -> None:
        self.steps.append(row)
        self._steps_file.write(_step_line(row))
        self._steps_file.flush()

    def evaluation(self, record: dict) -> None:
        self.evals.append(record)
        self._evals_file.write(_eval_line(record))
        self._evals_file.flush()

    def close(self) -> None:
        self._steps_file.close()
        self._evals_file.close()

    def state_dict(self) -> dict:
        return {"steps": list(self.steps), "evals": list(self.evals)}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.evals = list(state["steps"]), list(state["evals"])


def read_steps(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle, delimiter="\t")]


def read_evals(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
