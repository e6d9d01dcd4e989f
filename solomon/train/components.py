"""What a training run is made of: the files it reads and writes (``TrainPaths``) and its stateful parts
(``Components``), each with its own ``state_dict``, which a checkpoint saves and a resume restores under their names.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from solomon.model.gpt import GPT
from solomon.records import RunFiles
from solomon.train.averaging import WeightAverage
from solomon.train.checkpoint import Stateful, TorchRandomState
from solomon.train.data_order import DataOrder
from solomon.train.early_stopping import EarlyStopping
from solomon.train.fingerprint import MachineHistory
from solomon.train.optimizer import Optimizer
from solomon.train.run_log import RunLog
from solomon.train.schedule import LrSchedule


@dataclass(frozen=True)
class TrainPaths:
    tokens_dir: Path
    tokenizer: Path
    model_dir: Path
    checkpoints: Path
    steps_log: Path
    evals_log: Path
    metrics: Path  # the results (the DVC metric)
    anchors: Path | None = None  # where the replay anchors go at the end (None: none kept)
    run_record: Path | None = None  # timings and environment (None: ``train_run.json`` beside ``metrics``)

    def run_record_path(self) -> Path:
        return self.run_record or self.metrics.with_name(RunFiles.TRAIN_RUN)


@dataclass
class Components:
    """The stateful parts of a run: what a checkpoint saves, under these names."""

    model: GPT
    optimizer: Optimizer
    schedule: LrSchedule
    data_order: DataOrder
    early_stopping: EarlyStopping
    rng: TorchRandomState
    log: RunLog
    machines: MachineHistory
    average: WeightAverage | None = None  # with train.ema_decay > 0 (older checkpoints have none)

    def by_name(self) -> dict[str, Stateful]:
        parts = {field.name: getattr(self, field.name) for field in fields(self)}
        return {name: part for name, part in parts.items() if part is not None}

    def evaluated_model(self) -> GPT:
        """The model the evaluations score and save as the run's output: the weight average when there is one."""
        return self.average.model if self.average is not None else self.model
