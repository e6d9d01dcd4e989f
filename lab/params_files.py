"""params.yaml and docs/params.md written from the params models, which own every key's default, bounds and meaning.

``python -m lab params --write`` renders both; ``python -m lab params --check`` (and a test) says when either is stale.
params.yaml keeps the values it holds (a user's edits, ``dvc exp run -S``): only its comments, its key order and
any key it leaves out come from the models. The committed params.yaml holds the defaults.
"""

from __future__ import annotations

import tempfile
import textwrap
import typing
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from solomon.atomic import write_text
from solomon.errors import SolomonError
from solomon.params import Params, load_params
from solomon.pipeline import stage_params
from solomon.records import PARAMS_FILE

PARAMS_DOC = "docs/params.md"
WIDTH = 120
COMMENT_COLUMN = 25  # params.yaml's comments start here when the line leaves room

YAML_HEADER = """\
# Solomon parameters, one section per stage: the values of this run. Each key's default, bounds and meaning are
# declared once, in solomon/params.py; `python -m lab params --write` renders this file's comments and docs/params.md
# from there (values kept). Unknown keys and bad values are errors. Override one in an experiment: dvc exp run -S k=v.
"""

DOC_HEADER = """\
# Parameters

`params.yaml` has one section per stage and holds the default run's values. Every key's type, default, bounds and
meaning are declared once, beside its validator, in `solomon/params.py`; this page and params.yaml's comments are
written from there by `python -m lab params --write` (a test fails when either is stale). An unknown key or a bad value
is an error, not a default (`error: bad params.yaml: unknown key 'lr.warmpu' …`). Each stage declares in `dvc.yaml`
the params it reads, so changing a key reruns only the stages named in its section's heading below, and those after
them. Override any key for one experiment with `dvc exp run -S key=value`.

Values are checked strictly: a number where a number is wanted (`yes` or `"30"` for `train.max_steps` is an error,
not 1 or 30), a list where a list is wanted, no empty prompt, `corpus.split.val` and `corpus.split.test` above 0
(training evaluates on val, the evaluate stage on test), `corpus.source` inside the repository (DVC tracks only
files under it). Numbers are read as YAML 1.2 reads them, so `1e-3` is a float. The first stage, `check`, validates
the whole file and reads the corpus before any other stage runs: since DVC deletes a stage's outputs only just
before running that stage, a typo in `dvc exp run -S …` stops with one line and leaves `data/`, `models/` and
`checkpoints/` as they were (tested case by case). It writes, for each later stage, the validated values of the
params that stage reads (`data/checked/<stage>.json`); the stages depend on that file rather than on the params
code, so a change to a meaning or a comment reruns only `check`, and a stage reruns when the values it is given do.
"""

DOC_FOOTER = """
The whole chain of what reads these is in [training.md](training.md), [audit.md](audit.md) and
[ci-review.md](ci-review.md).
"""


def _sections(model: type[BaseModel]) -> list[tuple[str, FieldInfo, type[BaseModel] | None]]:
    """(name, field, nested section model or None) of each field, in declaration order."""
    found = []
    for name, field in model.model_fields.items():
        nested = (
            field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel) else None
        )
        found.append((name, field, nested))
    return found


def _scalar(value: Any) -> str:
    """A value in YAML flow style, on one line (JSON-compatible, so YAML 1.2 reads it back as the same value)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True, sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _plain(docstring: str | None) -> str:
    """A section's docstring as one line of text (reST's double backquotes as Markdown's single)."""
    return " ".join((docstring or "").split()).replace("``", "`")


def _comment_lines(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH - len(indent) - 2, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ")


def _keyed_line(indent: str, head: str, meaning: str) -> list[str]:
    """``head`` with its meaning as a trailing comment, or the comment above it where the line would be too long."""
    if not meaning:
        return [f"{indent}{head}"]
    start = f"{indent}{head}"
    line = (start.ljust(COMMENT_COLUMN - 1) if len(start) < COMMENT_COLUMN - 2 else f"{start} ") + f" # {meaning}"
    return [line] if len(line) <= WIDTH else [*_comment_lines(meaning, indent), f"{indent}{head}"]


def _yaml_lines(model: type[BaseModel], values: dict, indent: str) -> list[str]:
    lines: list[str] = []
    for name, field, nested in _sections(model):
        meaning = field.description or ""
        if nested is not None:
            doc = _plain(nested.__doc__)
            inner = _yaml_lines(nested, values.get(name) or {}, indent + "  ")
            lines += _keyed_line(indent, f"{name}:" + ("" if inner else " {}"), doc)
            lines += inner
            continue
        if name not in values:  # a sparse section (the data card) writes only what is set
            continue
        value = values[name]
        if isinstance(value, dict) and value:
            lines += _keyed_line(indent, f"{name}:", meaning)
            lines += [f"{indent}  {key}: {_scalar(item)}" for key, item in value.items()]
        else:
            lines += _keyed_line(indent, f"{name}: {_scalar(value)}", meaning)
    return lines


def render_params_yaml(params: Params) -> str:
    values = params.model_dump(mode="json", exclude_none=False)
    values["corpus"]["card"] = params.corpus.card.model_dump(mode="json", exclude_none=True)
    lines = [line.rstrip() for line in _yaml_lines(Params, values, "")]
    return YAML_HEADER + "\n".join(lines) + "\n"


def _bounds(field: FieldInfo) -> str:
    """The field's allowed values in words: its type, its bounds, whether null is allowed."""
    annotation = field.annotation
    args = typing.get_args(annotation)
    nullable = type(None) in args
    kinds = [arg for arg in args if arg is not type(None)] if nullable else [annotation]
    kind = kinds[0]
    if typing.get_origin(kind) is typing.Literal:
        text = " or ".join(f"`{choice}`" for choice in typing.get_args(kind))
    else:
        base = typing.get_origin(kind) or kind
        text = {
            int: "integer",
            float: "number",
            str: "text",
            bool: "`true` or `false`",
            list: "list",
            dict: "mapping",
        }.get(base, getattr(base, "__name__", str(base)))
        bounds: list[str] = []
        metadata = [*field.metadata, *(m for arg in typing.get_args(kind) for m in getattr(arg, "__metadata__", ()))]
        for item in metadata:
            for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
                bound = getattr(item, attr, None)
                if isinstance(item, annotated_types.BaseMetadata) and bound is not None:
                    bounds.append(f"{sign} {bound}")
        text += f" {' and '.join(bounds)}" if bounds else ""
    return text + (", or `null`" if nullable else "")


def _doc_rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows: list[str] = []
    for name, field, nested in _sections(model):
        key = f"{prefix}.{name}"
        if nested is not None:
            rows += _doc_rows(nested, key)
            continue
        default = (
            "(none)"
            if field.is_required()
            else f"`{_scalar(field.get_default(call_default_factory=True))}`".replace("|", "\\|")
        )
        rows.append(f"| `{key}` | {default} | {_bounds(field)} | {_linked(field.description or '')} |")
    return rows


def _linked(text: str) -> str:
    """docs/<page>.md references as links relative to the docs page."""
    words = [f"[{w[5:]}]({w[5:]})" if w.startswith("docs/") and w.endswith(".md") else w for w in text.split(" ")]
    return " ".join(words).replace("|", "\\|")


def _readers(section: str, stage_params: dict[str, list[str]]) -> str:
    readers = [
        stage
        for stage, names in stage_params.items()
        if stage != "check" and any(n == section or n.startswith(f"{section}.") for n in names)
    ]
    return ", ".join(readers) if readers else "`solomon promote` (no stage)"


def render_params_md(stage_params: dict[str, list[str]]) -> str:
    parts = [DOC_HEADER]
    for name, _field, nested in _sections(Params):
        assert nested is not None
        doc = _linked(_plain(nested.__doc__))
        parts.append(f"\n## `{name}.*` — {_readers(name, stage_params)}\n\n{doc}\n")
        parts.append("\n| key | default | values | meaning |\n|---|---|---|---|\n")
        parts.append("\n".join(_doc_rows(nested, name)) + "\n")
    return "".join(parts) + DOC_FOOTER


def rendered(repo: Path) -> dict[str, str]:
    """The two files as they should read: params.yaml with its own values, the docs page."""
    return {
        PARAMS_FILE: render_params_yaml(load_params(repo / PARAMS_FILE)),
        PARAMS_DOC: render_params_md(stage_params(repo)),
    }


def stale(repo: Path) -> list[str]:
    return [name for name, text in rendered(repo).items() if _reads(repo / name) != text]


def _reads(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def write(repo: Path) -> list[str]:
    """Render both files; returns those that changed. Values are kept: the rendered params.yaml is read back and
    must validate to the same params before anything is written."""
    texts = rendered(repo)
    with tempfile.TemporaryDirectory() as scratch:
        check = Path(scratch) / PARAMS_FILE
        check.write_text(texts[PARAMS_FILE], encoding="utf-8")
        if load_params(check) != load_params(repo / PARAMS_FILE):
            raise SolomonError(f"{PARAMS_FILE}: rendering would change a value; nothing was written")
    changed = [name for name, text in texts.items() if _reads(repo / name) != text]
    for name in changed:
        write_text(repo / name, texts[name])
    return changed
