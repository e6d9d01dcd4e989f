"""The training run's logs as it writes them: the per-step TSV (a DVC plot), the JSON-lines record of each
evaluation with its sample generations, beside it the evaluations' validation losses as a TSV (a DVC plot: DVC
cannot read JSON lines), and beside the step log the system samples (``solomon.train.system_metrics``), in the
formats ``solomon.records`` owns. Rows are appended and flushed as they happen, and
the rows so far are part of every checkpoint. The files are DVC ``persist`` outputs, so they survive a failed stage:
opening them always rewrites them whole from the rows held — none on a fresh run, the checkpoint's on a resume — so
the finished logs have no duplicated, no missing and no stale steps."""

from __future__ import annotations

from pathlib import Path

from solomon.atomic import write_text
from solomon.records import (
    STEP_HEADER,
    SYSTEM_FILE,
    SYSTEM_HEADER,
    VAL_LOSS_FILE,
    VAL_LOSS_HEADER,
    eval_line,
    step_line,
    system_line,
    val_loss_line,
)


class RunLog:
    def __init__(self, steps_path: Path, evals_path: Path) -> None:
        self.steps_path = steps_path
        self.evals_path = evals_path
        self.val_loss_path = evals_path.with_name(VAL_LOSS_FILE)
        self.system_path = steps_path.with_name(SYSTEM_FILE)
        self.steps: list[dict] = []
        self.evals: list[dict] = []
        self.system: list[dict] = []

    def open(self) -> None:
        """Write the rows held so far (none for a fresh run), then keep the files open for appending."""
        write_text(self.steps_path, STEP_HEADER + "".join(map(step_line, self.steps)))
        write_text(self.evals_path, "".join(map(eval_line, self.evals)))
        write_text(self.val_loss_path, VAL_LOSS_HEADER + "".join(map(val_loss_line, self.evals)))
        write_text(self.system_path, SYSTEM_HEADER + "".join(map(system_line, self.system)))
        self._steps_file = open(self.steps_path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        self._evals_file = open(self.evals_path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        self._val_loss_file = open(self.val_loss_path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        self._system_file = open(self.system_path, "a", encoding="utf-8", newline="")  # noqa: SIM115

    def step(self, row: dict) -> None:
        self.steps.append(row)
        self._steps_file.write(step_line(row))
        self._steps_file.flush()

    def evaluation(self, record: dict) -> None:
        self.evals.append(record)
        self._evals_file.write(eval_line(record))
        self._evals_file.flush()
        self._val_loss_file.write(val_loss_line(record))
        self._val_loss_file.flush()

    def system_sample(self, row: dict) -> None:
        self.system.append(row)
        self._system_file.write(system_line(row))
        self._system_file.flush()

    def close(self) -> None:
        self._steps_file.close()
        self._evals_file.close()
        self._val_loss_file.close()
        self._system_file.close()

    def state_dict(self) -> dict:
        return {"steps": list(self.steps), "evals": list(self.evals), "system": list(self.system)}

    def load_state_dict(self, state: dict) -> None:
        # A checkpoint from before the system log has no samples: the resumed log starts at the resume.
        self.steps, self.evals, self.system = list(state["steps"]), list(state["evals"]), list(state.get("system", []))
