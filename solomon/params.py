"""Load and validate params.yaml in one place: unknown keys and bad values are errors, never silent defaults.

Types are strict: a number where a number is wanted (no ``yes`` read as 1, no ``"30"`` read as 30), a list where a
list is wanted. The file is read as YAML 1.2 reads numbers (``1e-3`` is a float, as DVC writes it; PyYAML alone
would read a string).

Every default below is params.yaml's value (tests/test_defaults.py holds them equal): params.yaml is what users
edit and DVC tracks; the defaults only fill sections that tests and older run directories leave out. A param
added later defaults to what the code did before it existed, so older records (checkpoints, docs runs) stay valid.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from solomon.errors import SolomonError
from solomon.families import FAMILIES
from solomon.records import PARAMS_FILE

PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(ge=0.0, lt=1.0)]


def Param(default: Any = ..., meaning: str = "", before: Any = ..., **constraints: Any) -> Any:
    """One parameter: its default, its bounds and its one-line meaning, declared together. The meaning is what
    params.yaml's comment and docs/params.md say (``python -m lab params --write`` renders both). ``before``, where the
    default has moved since the param was added: what the code did before it existed, so a record made then
    (without the key) ran as this value (``before_values``)."""
    extra = {} if before is ... else {"json_schema_extra": {"before": before}}
    return Field(default, description=meaning, **extra, **constraints)


class ParamError(ValueError):
    """A check across a section's fields, failing with the one ``field`` to change: the error names its dotted
    path (``train.accum_steps``), not the section."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SplitParams(_Section):
    """Each document's split is decided by a salted hash of its content, so it never moves between runs."""

    val: Fraction = Param(0.05, "fraction of documents in the val split (above 0: training evaluates on it)")
    test: Fraction = Param(0.05, "fraction in the test split (above 0); val + test must stay below 0.5")
    salt: str = Param("solomon-split-v1", "salt of the content hash that assigns a document its split")

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


def _card_text(meaning: str) -> Any:
    return Param(None, meaning)


class CardParams(_Section):
    """A user corpus's data-card text (the KJV's card is built in); the datacard stage alone reads it
    (docs/corpus.md)."""

    pretty_name: str | None = _card_text("the corpus's display name")
    license: str | None = _card_text("its licence (an SPDX id where there is one)")
    language: list[str] | None = _card_text("its languages (ISO 639-1 codes)")
    source_datasets: list[str] | None = _card_text("the data sets it was drawn from")
    motivation: str | None = _card_text("datasheet: why the corpus was made")
    composition: str | None = _card_text("datasheet: what it holds")
    collection: str | None = _card_text("datasheet: how it was collected")
    uses: str | None = _card_text("datasheet: what it is and is not fit for")
    distribution: str | None = _card_text("datasheet: how it is distributed")
    maintenance: str | None = _card_text("datasheet: who maintains it")
    known_limitations: str | None = _card_text("datasheet: its known limitations")


KJV_SHA256 = "51a4d6ed5592001b9386e2f292d3953132a2662240eb8ad08533d625f1259717"


class CorpusParams(_Section):
    """What the prepare stage reads: a source, normalised, deduplicated and split by content hash."""

    source: str = Param(
        "kjv",
        "kjv, or under corpus/: a directory or glob of .txt files, a .jsonl(.gz/.zst) file or Parquet (docs/corpus.md)",
    )
    kjv_sha256: str = Param(
        KJV_SHA256, "the SHA256 the default corpus file must have; another file is refused", pattern=r"^[0-9a-f]{64}$"
    )
    text_field: str = Param("text", ".jsonl and Parquet: the field (column) holding a document's text")
    id_field: str | None = Param(
        None, ".jsonl and Parquet: the field (column) holding a document id (null: file and line or row)"
    )
    min_chars: int = Param(1, "documents shorter than this after normalisation are dropped", ge=1)
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

    @model_validator(mode="after")
    def _id_is_not_the_text(self) -> CorpusParams:
        if self.id_field is not None and self.id_field == self.text_field:
            raise ParamError(
                "id_field", f"'{self.id_field}' is the text field itself: name an id field, or null for file and line"
            )
        return self


class TokenizerParams(_Section):
    """A byte-level BPE tokenizer (Hugging Face tokenizers) trained on the train split."""

    vocab_size: int = Param(8192, "byte-level BPE vocabulary size", ge=300, le=65536)
    min_frequency: PositiveInt = Param(2, "a pair merges only when seen at least this often")
    eod_token: str = Param(
        "<|endoftext|>", "the special token that ends every document: a bracketed marker, never ordinary text"
    )
    sample_bytes: PositiveInt = Param(
        32_000_000,
        "text the BPE is trained on: the train documents of smallest SHA256 that fit in this many UTF-8 bytes, "
        "the same whatever the corpus's order or the machine (the KJV's 3.8 MB train split fits whole)",
    )

    @field_validator("eod_token")
    @classmethod
    def _a_marker(cls, token: str) -> str:
        if not re.fullmatch(r"<[^\s<>]+>|\[[^\s\[\]]+\]", token):
            raise ValueError(
                "must be a bracketed marker without spaces, such as <|endoftext|>, </s> or [EOS]: it becomes one "
                "special token, and a served prompt that spells it is read as a document's end"
            )
        return token


def with_family_defaults(model: dict) -> dict:
    """A model section (as params.yaml holds it) with a null option replaced by its family's value (the model's
    config holds the value it was built with)."""
    family = FAMILIES.get(model.get("family", "gpt2"))
    defaults = family.defaults if family else {}
    return model | {name: value for name, value in defaults.items() if model.get(name) is None}


class ModelParams(_Section):
    """The decoder (solomon/model/gpt.py): pre-norm blocks, tied embeddings; the llama family by default."""

    # The block family (docs/architecture.md): each one's meaning is its entry in solomon/families.py.
    family: Literal["gpt2", "llama"] = Param(
        "llama", "the block family: gpt2 or llama (docs/architecture.md, docs/families-full.md)", before="gpt2"
    )
    n_layer: PositiveInt = Param(6, "Transformer blocks")
    n_head: PositiveInt = Param(4, "attention heads; must divide model.n_embd")
    n_embd: PositiveInt = Param(256, "width of the residual stream")
    block_size: PositiveInt = Param(256, "context length in tokens")
    dropout: float = Param(
        0.2,
        "dropout on embeddings and residual branches (not attention probabilities: docs/performance.md)",
        ge=0.0,
        lt=1.0,
    )
    bias: bool = Param(False, "biases in linear layers and LayerNorm (gpt2 only)")
    # GPT-2's family takes three options (docs/architecture.md); a gpt2 model with any of them on is served and
    # scored by Solomon (and `mlflow models serve`), not exported to transformers or GGUF.
    position: Literal["learned", "rotary"] | None = Param(
        None,
        "how positions enter: learned embeddings added to the input, or rotary on queries and keys (null: the "
        "family's, learned for gpt2, rotary for llama)",
    )
    qk_norm: bool | None = Param(
        None,
        "RMS-normalise each head's queries and keys before attention, with a gain in the llama family (Qwen3's "
        "layout) (null: the family's, off for gpt2, on for llama)",
        before=False,
    )
    activation: Literal["gelu", "relu2", "swiglu"] | None = Param(
        None, "the MLP: exact GELU, ReLU squared, or SwiGLU (null: the family's, gelu for gpt2, swiglu for llama)"
    )
    value_embeddings: int = Param(
        0,
        "blocks, from the first, whose attention values get a learned embedding of the token added (modded-nanogpt's "
        "value embeddings; 0: none); no Hugging Face or GGUF layout of ours carries them (docs/architecture.md)",
        ge=0,
    )
    logit_softcap: float | None = Param(
        None,
        "c of a soft cap on the output logits, c·tanh(logits / c), as Gemma 2's final one (null: none); no Hugging "
        "Face or GGUF layout of ours carries it (docs/architecture.md)",
        gt=0.0,
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelParams:
        if self.n_embd % self.n_head:
            heads = ", ".join(str(n) for n in range(1, 17) if self.n_embd % n == 0)
            raise ParamError(
                "n_head", f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}): n_head {heads} fit"
            )
        return self

    @model_validator(mode="after")
    def _value_embeddings_fit(self) -> ModelParams:
        if self.value_embeddings > self.n_layer:
            raise ParamError(
                "value_embeddings",
                f"value_embeddings ({self.value_embeddings}) counts blocks: at most model.n_layer ({self.n_layer})",
            )
        return self

    @model_validator(mode="after")
    def _within_the_family(self) -> ModelParams:
        family = FAMILIES[self.family]
        for name, allowed in family.fixed.items():
            value = getattr(self, name)
            if value not in (None, allowed):
                raise ParamError(
                    name, f"family {self.family} has {allowed} only (got {value}): set it to null or {allowed}"
                )
        if self.bias and not family.biases:
            raise ParamError("bias", f"family {self.family} has no biases: set model.bias: false")
        return self


class EarlyStoppingParams(_Section):
    """Stop when the validation loss has not improved by more than ``min_delta`` for ``patience`` evaluations."""

    patience: PositiveInt | None = Param(5, "evaluations without improvement before stopping (null: never stop)")
    min_delta: float = Param(0.0, "the improvement that counts", ge=0.0)


class SampleParams(_Section):
    """Generations from fixed prompts at every evaluation, drawn from their own random stream."""

    prompts: list[Annotated[str, Field(min_length=1)]] = Param(
        ["In the beginning", "And the LORD said", "Blessed are"], "prompts generated from at every evaluation"
    )
    temperature: float = Param(0.8, "sampling temperature (also solomon generate's default)", gt=0.0)
    top_k: PositiveInt | None = Param(40, "top-k of sampling (null: none)")
    max_new_tokens: int = Param(48, "tokens generated per prompt", ge=0)


class MuonParams(_Section):
    """torch.optim.Muon's settings on the blocks' hidden weight matrices, used only with ``train.optimizer: muon``."""

    momentum: Fraction = Param(0.95, "Muon's momentum")
    nesterov: bool = Param(True, "Nesterov momentum for Muon")
    ns_steps: int = Param(
        5,
        "Newton-Schulz iterations orthogonalising each Muon update: fewer cost less but orthogonalise less (< 100)",
        ge=1,
        lt=100,
    )


class TrainParams(_Section):
    """The training loop (docs/training.md): optimiser, evaluation, checkpoints and the process layout."""

    seed: int = Param(1337, "the seed every named random stream derives from")
    max_steps: PositiveInt = Param(
        1650,
        "optimiser steps; the default is sized to the training-time budgets of an AVX2-only CPU (fp32) and of the "
        "slowest kind with native bf16 measured (docs/reference-run.md gives a step's time per kind)",
    )
    batch_size: PositiveInt = Param(16, "sequences per optimiser step, across micro-batches and ranks")
    accum_steps: PositiveInt = Param(
        1, "micro-batches per step; accum_steps × nproc must divide batch_size (docs/training.md)"
    )
    label_smoothing: float = Param(
        0.15,
        "label smoothing ε of the training loss: above 0.1 so that the default's many passes over the corpus do not "
        "leave it overconfident (docs/levers-full.md)",
        ge=0.0,
        lt=1.0,
    )
    optimizer: Literal["adamw", "muon"] = Param(
        "muon", "adamw, or muon: Muon on the blocks' 2-D hidden weights, AdamW on the rest (docs/training.md)"
    )
    muon: MuonParams = MuonParams()
    weight_decay: float = Param(
        0.1,
        "decoupled weight decay of weight matrices and embeddings (both optimisers), not biases or norm gains",
        ge=0.0,
    )
    ema_decay: Fraction = Param(
        0.0,
        "decay of an exponential moving average of the weights, evaluated and saved in their place (0: none; "
        "docs/training.md)",
    )
    beta1: Fraction = Param(0.9, "AdamW β1")
    beta2: Fraction = Param(0.95, "AdamW β2")
    clip: float = Param(1.0, "maximum global gradient norm (0: no clipping); the pre-clip norm is logged", ge=0.0)
    eval_interval: PositiveInt = Param(200, "steps between evaluations on the validation subset (and at the last step)")
    eval_tokens: PositiveInt = Param(
        8192, "size of that subset: windows spread evenly from the val split's start to its end, the same each time"
    )
    early_stopping: EarlyStoppingParams = EarlyStoppingParams()
    samples: SampleParams = SampleParams()
    ckpt_interval: PositiveInt = Param(
        200, "steps between checkpoints (also at the end and on SIGTERM/SIGINT); may change on resume"
    )
    keep_checkpoints: PositiveInt = Param(3, "how many checkpoints are kept; may change on resume")
    compile: bool = Param(False, "wrap the model in torch.compile (no gain here; not covered by the resume tests)")
    precision: Literal["auto", "bf16", "fp32"] = Param(
        "auto",
        "auto: bf16 where the CPU has native bf16 matmuls, else fp32; bf16: autocast and Muon's orthogonalisation in "
        "bf16; fp32 throughout (docs/training.md); a run resumes only in the precision it resolved to",
    )
    threads: PositiveInt = Param(2, "torch threads per process")
    portable: bool = Param(
        False,
        "the same bytes on any x86-64 host with AVX2: kernels pinned to one AVX2 path, fp32 only, Muon's "
        "orthogonalisation in fp32; several times slower a step (docs/portable.md)",
    )
    nproc: PositiveInt = Param(
        1, "data-parallel processes; above 1 the stage runs itself under torchrun (docs/kubernetes.md)"
    )

    @model_validator(mode="after")
    def _portable_runs_fp32(self) -> TrainParams:
        if self.portable and self.precision == "bf16":
            raise ParamError(
                "portable",
                "train.portable needs train.precision: fp32 or auto (bf16 matmuls on the AVX2 path every host shares "
                "run without bf16 hardware, far too slowly to train): set both, or train.portable: false",
            )
        if self.portable and self.compile:
            raise ParamError(
                "portable",
                "train.portable needs train.compile: false (compiled kernels are generated for this host's "
                "instruction set)",
            )
        return self

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
    """A linear warm-up to the peak, then constant (warm-up–stable–decay) or Noam's lr(s) = peak · sqrt(warmup / s),
    s the 1-based step; then the cooldown to zero."""

    schedule: Literal["noam", "constant"] = Param(
        "constant",
        "constant (peak held: warm-up–stable–decay with the cooldown; docs/training.md), or noam (1/√s decay)",
        before="noam",
    )
    peak: float = Param(
        2e-3, "the learning rate at step lr.warmup (the optimiser sweep's best with Muon: docs/training.md)", gt=0.0
    )
    warmup: PositiveInt = Param(200, "steps of linear warm-up (docs/training.md)")
    cooldown: Fraction = Param(
        0.2,
        "the last fraction of train.max_steps over which the rate falls linearly to zero (0: none; docs/training.md)",
        before=0.0,
    )


class EvalParams(_Section):
    """Held-out scoring: perplexity, bits per byte and calibration (docs/calibration.md)."""

    batch_size: PositiveInt = Param(16, "sequences per batch when scoring, during training and in the evaluate stage")
    max_tokens: PositiveInt | None = Param(
        None, "tokens of each split the evaluate stage scores (null: the whole split)"
    )
    threads: PositiveInt = Param(2, "torch threads of the evaluate stage")
    calibration_bins: int = Param(
        15, "bins of equal token count (by top-1 confidence) of the ECE, MCE and reliability diagram", ge=2
    )
    tasks: list[Annotated[str, Field(min_length=1)]] = Param(
        ["tasks/solomon_heldout.yaml", "tasks/solomon_next_line.yaml"],
        "lm-eval task files (repository paths) the evaluate stage scores the model on, local data only "
        "(docs/scores.md)",
    )

    @field_validator("tasks")
    @classmethod
    def _distinct_tasks(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a task file is named twice")
        return value


class ReportParams(_Section):
    """The run directories."""

    root: str = Param("reports/training", "where run directories are written")


class TrackingParams(_Section):
    """MLflow, live from the training loop and again by the report; changes no stage's outputs (docs/tracking.md)."""

    enabled: bool = Param(True, "log to MLflow: MLFLOW_TRACKING_URI, else SQLite mlflow.db at the repository root")


# a held-out metric, or a benchmark task's score (tasks.<task>.<metric>: metrics.json's tasks section)
MetricKey = Annotated[
    str, Field(pattern=r"^((val|test)\.(loss|perplexity|bits_per_byte|accuracy)|tasks\.[\w-]+\.[a-z_]+)$")
]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
PathText = Annotated[str, Field(min_length=1)]


class RequireParams(_Section):
    """What the gate demands beyond a run that verifies against its own manifest (nothing by default; docs/audit.md).
    Paths are repository-relative or absolute and must lie outside the run directory: a key or digest shipped with
    the run would vouch for itself."""

    signature: PathText | None = Param(None, "a PEM public key: the run's manifest.sig must verify with it")
    digest_file: PathText | None = Param(None, "a file holding the manifest SHA256 the run must have ...")
    digest_env: EnvName | None = Param(None, "... or the environment variable holding it")

    @model_validator(mode="after")
    def _one_digest_source(self) -> RequireParams:
        if self.digest_file is not None and self.digest_env is not None:
            raise ParamError(
                "digest_env", "give digest_file or digest_env, not both: the expected digest has one source"
            )
        return self


class PromoteParams(_Section):
    """`solomon promote`'s gate: what the run must carry, thresholds on the held-out metrics, then no regression
    against the champion."""

    model_name: str = Param("solomon", "the registered model in MLflow")
    alias: str = Param("champion", "the alias that names the serving version")
    max: dict[MetricKey, float] = Param(
        {"test.bits_per_byte": 1.6}, "refuse when a held-out metric (val.* / test.*) is above its maximum"
    )
    min: dict[MetricKey, float] = Param(
        {}, "refuse when one is below its minimum (e.g. test.accuracy, tasks.solomon_next_line.acc)"
    )
    compare: str = Param(
        "test.bits_per_byte",
        "lower is better; refuse a regression against the champion ...",
        pattern=r"^(val|test)\.(loss|perplexity|bits_per_byte)$",
    )
    tolerance: float = Param(0.0, "... beyond this relative margin", ge=0.0, lt=1.0)
    require: RequireParams = RequireParams()


class Params(_Section):
    """params.yaml: one section per stage (the headings of docs/params.md name the stages that read each)."""

    corpus: CorpusParams = CorpusParams()
    tokenizer: TokenizerParams = TokenizerParams()
    model: ModelParams = ModelParams()
    train: TrainParams = TrainParams()
    lr: LrParams = LrParams()
    eval: EvalParams = EvalParams()
    report: ReportParams = ReportParams()
    tracking: TrackingParams = TrackingParams()
    promote: PromoteParams = PromoteParams()

    @model_validator(mode="after")
    def _cooldown_has_steps(self) -> Params:
        # LrSchedule's rule, met here so that the check stage stops on it, not the train stage
        if self.lr.cooldown and not round(self.lr.cooldown * self.train.max_steps):
            raise ParamError(
                "lr.cooldown",
                f"lr.cooldown {self.lr.cooldown} of train.max_steps {self.train.max_steps} is no step: raise it to "
                f"at least {1 / self.train.max_steps:.3g}, or set 0 for no cooldown",
            )
        return self


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


def before_values(section: type[BaseModel] | None = None, prefix: str = "") -> dict[str, Any]:
    """{dotted key: what the code did before the param existed}, for the params declared with ``before``."""
    values: dict[str, Any] = {}
    for name, field in (section or Params).model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            values |= before_values(field.annotation, key)
        elif isinstance(field.json_schema_extra, dict) and "before" in field.json_schema_extra:
            values[key] = field.json_schema_extra["before"]
    return values


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


def parse_yaml(text: str) -> Any:
    """YAML text as params are read (numbers as YAML 1.2 reads them): every YAML file Solomon reads goes here."""
    return yaml.load(text, Loader=_Yaml12Loader)


def read_yaml(path: Path) -> Any:
    return parse_yaml(path.read_text(encoding="utf-8"))


def with_before_values(raw: dict) -> dict:
    """A run's recorded params (its hyperparameters.yaml) with each key it predates, of those whose default has moved
    since (``before``), set to what the code did then: the record is read as the run ran."""
    filled = {section: dict(values) if isinstance(values, dict) else values for section, values in raw.items()}
    for key, value in before_values().items():
        *sections, name = key.split(".")
        node = filled
        for section in sections:
            if not isinstance(node.get(section), dict):
                break
            node[section] = node = dict(node[section])
        else:
            node.setdefault(name, value)
    return filled


def load_params(path: str | Path = PARAMS_FILE, recorded: bool = False) -> Params:
    """params.yaml at ``path``; ``recorded``: a run's record of them (hyperparameters.yaml), whose missing keys mean
    what the code did when it ran (``with_before_values``), not today's defaults."""
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
        return Params.model_validate(with_before_values(raw) if recorded else raw)
    except ValidationError as exc:
        extra = f" and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        raise SolomonError(f"bad {path}: {describe_error(exc)}{extra}") from None


def runs_root(repo: Path) -> str:
    """Where the runs of the repository ``repo`` live: report.root of its params.yaml, or the default where there is
    none (the serving image holds only the run directory, weights and tokenizer)."""
    path = repo / PARAMS_FILE
    return load_params(path).report.root if path.is_file() else ReportParams().root
