"""Load and validate params.yaml in one place: unknown keys and bad values are errors, never silent defaults.

Types are strict: a number where a number is wanted (no ``yes`` read as 1, no ``"30"`` read as 30), a list where a
list is wanted. The file is read as YAML 1.2 reads numbers (``1e-3`` is a float, as DVC writes it; PyYAML alone
would read a string).

Every default below is params.yaml's value (tests/test_defaults.py holds them equal): params.yaml is what users
edit and DVC tracks; the defaults only fill sections that tests and older run directories leave out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from solomon.errors import SolomonError
from solomon.records import PARAMS_FILE

PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(ge=0.0, lt=1.0)]


class ParamError(ValueError):
    """A check across a section's fields, failing with the one ``field`` to change: the error names its dotted
    path (``train.accum_steps``), not the section."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SplitParams(_Section):
    val: Fraction = 0.05
    test: Fraction = 0.05
    salt: str = "solomon-split-v1"

    @field_validator("val", "test")
    @classmethod
    def _above_zero(cls, fraction: float) -> float:
        if fraction <= 0:
            raise ValueError(
                "must be above 0: training evaluates on val and the evaluate stage on test (0.05 each is the default)"
            )
        return fraction

    @model_validator(mode="after")
    def _leaves_train(self) -> SplitParams:
        if self.val + self.test >= 0.5:
            raise ParamError(
                "test", f"val + test must be below 0.5 so that most documents train (now {self.val} + {self.test})"
            )
        return self


class CardParams(_Section):
    """Human-written data-card fields for a user corpus (the KJV's are built in)."""

    pretty_name: str | None = None
    license: str | None = None
    language: list[str] | None = None
    source_datasets: list[str] | None = None
    motivation: str | None = None
    composition: str | None = None
    collection: str | None = None
    uses: str | None = None
    distribution: str | None = None
    maintenance: str | None = None
    known_limitations: str | None = None


class CorpusParams(_Section):
    source: str = "kjv"
    kjv_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    text_field: str = "text"
    id_field: str | None = None
    min_chars: Annotated[int, Field(ge=1)] = 1
    split: SplitParams = SplitParams()
    card: CardParams = CardParams()

    @field_validator("source")
    @classmethod
    def _inside_the_repository(cls, source: str) -> str:
        path = Path(source)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(
                "must name files inside the repository (e.g. corpus/*.txt): DVC tracks and hashes only files "
                "under it, so a run from files outside could not be reproduced; copy them into corpus/"
            )
        return source


class TokenizerParams(_Section):
    vocab_size: Annotated[int, Field(ge=300, le=65536)] = 8192
    min_frequency: PositiveInt = 2
    eod_token: str = "<|endoftext|>"


class ModelParams(_Section):
    n_layer: PositiveInt = 6
    n_head: PositiveInt = 6
    n_embd: PositiveInt = 384
    block_size: PositiveInt = 256
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.2
    bias: bool = False

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelParams:
        if self.n_embd % self.n_head:
            heads = ", ".join(str(n) for n in range(1, 17) if self.n_embd % n == 0)
            raise ParamError(
                "n_head", f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}): n_head {heads} fit"
            )
        return self


class EarlyStoppingParams(_Section):
    """Stop when val loss has not improved by more than ``min_delta`` for ``patience`` evaluations (null: never)."""

    patience: PositiveInt | None = 5
    min_delta: Annotated[float, Field(ge=0.0)] = 0.0


class SampleParams(_Section):
    """Generations from fixed prompts at every evaluation, drawn from their own random stream."""

    prompts: list[Annotated[str, Field(min_length=1)]] = ["In the beginning", "And the LORD said", "Blessed are"]
    temperature: Annotated[float, Field(gt=0.0)] = 0.8
    top_k: PositiveInt | None = 40
    max_new_tokens: Annotated[int, Field(ge=0)] = 48


class MuonParams(_Section):
    """torch.optim.Muon on the blocks' hidden weight matrices, used only with ``train.optimizer: muon``."""

    momentum: Fraction = 0.95
    nesterov: bool = True
    ns_steps: Annotated[int, Field(ge=1, lt=100)] = 5  # Newton-Schulz iterations per update (torch allows < 100)


class TrainParams(_Section):
    seed: int = 1337
    max_steps: PositiveInt = 3300
    batch_size: PositiveInt = 16  # sequences per optimiser step, across micro-batches (and ranks)
    accum_steps: PositiveInt = 1  # micro-batches per optimiser step; must divide batch_size
    label_smoothing: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    # adamw: AdamW on every parameter; muon: Muon on the blocks' hidden matrices, AdamW on the rest
    optimizer: Literal["adamw", "muon"] = "muon"
    muon: MuonParams = MuonParams()
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.1  # both optimisers': on matrices and embeddings only
    beta1: Fraction = 0.9
    beta2: Fraction = 0.95
    clip: Annotated[float, Field(ge=0.0)] = 1.0  # max global grad norm; 0 disables clipping
    eval_interval: PositiveInt = 200
    eval_tokens: PositiveInt = 8192  # size of the fixed validation subset used during training
    early_stopping: EarlyStoppingParams = EarlyStoppingParams()
    samples: SampleParams = SampleParams()
    ckpt_interval: PositiveInt = 200
    keep_checkpoints: PositiveInt = 3
    compile: bool = False
    precision: Literal["fp32", "bf16"] = "bf16"
    threads: PositiveInt = 2  # per process
    nproc: PositiveInt = 1  # data-parallel processes (torchrun on this machine); each takes its slice of a batch

    @model_validator(mode="after")
    def _accum_divides_batch(self) -> TrainParams:
        if self.batch_size % (self.accum_steps * self.nproc):
            fits = [n for n in range(1, self.batch_size + 1) if self.batch_size % (n * self.nproc) == 0][:8]
            raise ParamError(
                "accum_steps",
                f"accum_steps × nproc ({self.accum_steps} × {self.nproc}) must divide batch_size ({self.batch_size}): "
                f"accum_steps {', '.join(map(str, fits)) or '(none: batch_size must be a multiple of nproc)'} fit",
            )
        return self


class LrParams(_Section):
    """Noam schedule, written with its peak: lr(s) = peak · min(s / warmup, sqrt(warmup / s))."""

    schedule: Literal["noam"] = "noam"
    peak: Annotated[float, Field(gt=0.0)] = 2e-3
    warmup: PositiveInt = 200


class EvalParams(_Section):
    batch_size: PositiveInt = 16
    max_tokens: PositiveInt | None = None
    threads: PositiveInt = 2
    calibration_bins: int = Field(15, ge=2)  # equal-mass bins of the ECE and the reliability diagram


class ReportParams(_Section):
    root: str = "reports/training"


class TrackingParams(_Section):
    """MLflow: live from the training loop, then the report. Not a dependency of any stage's outputs."""

    enabled: bool = True  # MLFLOW_TRACKING_URI, else SQLite mlflow.db at the repository root


METRIC_NAMES = ("loss", "perplexity", "bits_per_byte", "accuracy")
MetricKey = Annotated[str, Field(pattern=r"^(val|test)\.(loss|perplexity|bits_per_byte|accuracy)$")]


EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class RequireParams(_Section):
    """What the gate demands beyond a run that verifies against its own manifest (nothing by default). Paths are
    repository-relative or absolute and must lie outside the run directory: a key or digest shipped with the run
    would vouch for itself."""

    signature: Annotated[str, Field(min_length=1)] | None = None  # PEM public key: manifest.sig must verify with it
    digest_file: Annotated[str, Field(min_length=1)] | None = None  # a file holding the manifest SHA256 to expect
    digest_env: EnvName | None = None  # or the environment variable holding it

    @model_validator(mode="after")
    def _one_digest_source(self) -> RequireParams:
        if self.digest_file is not None and self.digest_env is not None:
            raise ParamError(
                "digest_env", "give digest_file or digest_env, not both: the expected digest has one source"
            )
        return self


class PromoteParams(_Section):
    """The promotion gate: what the run must carry (``require``), thresholds on the held-out metrics, then no
    regression against the champion."""

    model_name: str = "solomon"
    alias: str = "champion"
    max: dict[MetricKey, float] = {"test.bits_per_byte": 1.6}  # refuse above
    min: dict[MetricKey, float] = {}  # e.g. {test.accuracy: 0.2}: refuse below
    compare: Annotated[str, Field(pattern=r"^(val|test)\.(loss|perplexity|bits_per_byte)$")] = "test.bits_per_byte"
    tolerance: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0  # relative: how much worse than the champion passes
    require: RequireParams = RequireParams()


class Params(_Section):
    corpus: CorpusParams
    tokenizer: TokenizerParams = TokenizerParams()
    model: ModelParams = ModelParams()
    train: TrainParams = TrainParams()
    lr: LrParams = LrParams()
    eval: EvalParams = EvalParams()
    report: ReportParams = ReportParams()
    tracking: TrackingParams = TrackingParams()
    promote: PromoteParams = PromoteParams()


def flatten(mapping: dict, prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys: {"lr": {"warmup": 100}} → {"lr.warmup": 100} (lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def describe_error(error: ValidationError) -> str:
    """The first error as one line naming the param: no dump of the section a cross-field check looked at."""
    first = error.errors()[0]
    blamed = first.get("ctx", {}).get("error")
    loc = (*first["loc"], blamed.field) if isinstance(blamed, ParamError) else first["loc"]
    where = ".".join(str(part) for part in loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        return f"unknown key '{where}' (remove it or check its spelling)"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "value_error" or isinstance(first.get("input"), dict):
        return f"'{where}': {message}"
    got = "null" if first.get("input") is None else repr(first.get("input"))  # as params.yaml spells it
    return f"'{where}': {message} (got {got if len(got) <= 60 else got[:57] + '...'})"


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where ``1e-3`` is a string; YAML 1.2 (and DVC, which writes params.yaml) reads a
    float. Read numbers the 1.2 way."""


_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.?[0-9_]*(?:[eE][-+]?[0-9]+)$|^[-+]?[0-9][0-9_]*\.[0-9_]*$|^[-+]?\.[0-9_]+$"),
    list("-+0123456789."),
)


def read_yaml(path: Path) -> Any:
    """A YAML file as params are read (numbers as YAML 1.2 reads them)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Yaml12Loader)


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    path = Path(path)
    try:
        raw = read_yaml(path)
    except FileNotFoundError:
        raise SolomonError(f"{path} not found: run from the repository root") from None
    except yaml.YAMLError as exc:
        raise SolomonError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise SolomonError(f"{path} must be a mapping of sections (corpus, tokenizer, model, ...)")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        extra = f" and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        raise SolomonError(f"bad {path}: {describe_error(exc)}{extra}") from None


def runs_root(repo: Path) -> str:
    """Where the runs of the repository ``repo`` live: report.root of its params.yaml, or the default where there is
    none (the serving image holds only the run directory, weights and tokenizer)."""
    path = repo / PARAMS_FILE
    return load_params(path).report.root if path.is_file() else ReportParams().root
