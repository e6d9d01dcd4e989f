"""dvc.yaml's code dependencies, written from each stage script's import closure (``python -m lab deps --write``).

A stage depends on the package modules its script runs, found by reading imports (solomon.imports), never listed
by hand; a test fails when dvc.yaml is not what this writes. Two deliberate exceptions:
- the params code: a stage after ``check`` depends on ``data/checked/<stage>.json`` (the values check validated
  for it) instead, so a comment or a meaning edited in solomon/params.py reruns ``check`` alone;
- modules that cannot change a stage's outputs (``OUTPUT_NEUTRAL``): the train stage's MLflow tracking.
The check stage's outputs are those files, one per later stage that reads params; its command names each such
stage with its params list (DVC cannot depend on dvc.yaml itself), so changing a list reruns check.
"""

from __future__ import annotations

import io
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import FoldedScalarString

from solomon.atomic import write_text
from solomon.imports import closure, relative_names
from solomon.pipeline import CHECK_STAGE, check_arguments, checked_stages
from solomon.records import DVC_YAML, checked_params_path

PARAMS_MODULE = "solomon.params"
# Modules a stage runs whose code cannot change its outputs, left out of its deps (what only they import too).
OUTPUT_NEUTRAL: dict[str, tuple[str, ...]] = {"train": ("solomon.tracking",)}


def stage_script(stage: str) -> str:
    return f"stages/{stage}.py"


def code_deps(repo: Path, stage: str, checked: dict[str, list[str]]) -> list[str]:
    """The deps that stand for the stage's code: its script, the package modules it runs, its checked params."""
    exclude = OUTPUT_NEUTRAL.get(stage, ())
    if stage != CHECK_STAGE:
        exclude = (*exclude, PARAMS_MODULE)
    modules = relative_names(closure(repo / stage_script(stage), exclude=exclude))
    if stage == CHECK_STAGE:
        return [stage_script(stage), *modules]
    return [stage_script(stage), *modules, *([checked_params_path(stage)] if stage in checked else [])]


def one_per_line(argv: list[str], first: int) -> FoldedScalarString:
    """A folded YAML command with the words after the ``first`` ones each on a line of their own."""
    text = FoldedScalarString(" ".join(argv))
    ends = [len(" ".join(argv[: i + 1])) for i in range(first - 1, len(argv) - 1)]
    text.fold_pos = ends  # ruamel folds at these spaces: a reader sees one line per argument
    return text


def is_code_dep(dep: str) -> bool:
    return dep.startswith(("stages/", "solomon/", "data/checked"))


def rendered(repo: Path) -> tuple[YAML, dict]:
    """dvc.yaml as it should read: each stage's code deps derived, its data deps kept in their order."""
    yaml = YAML()  # round-trip: comments, order and layout stay as written
    yaml.width = 120
    yaml.indent(mapping=2, sequence=4, offset=2)
    document = yaml.load((repo / DVC_YAML).read_text(encoding="utf-8"))
    checked = checked_stages(repo)
    for name, stage in document["stages"].items():
        data = [str(dep) for dep in stage.get("deps", []) if not is_code_dep(str(dep))]
        deps = stage["deps"]
        deps.clear()
        deps.extend([*code_deps(repo, name, checked), *data])
        if name == CHECK_STAGE:
            stage["cmd"] = one_per_line(["python", stage_script(CHECK_STAGE), *check_arguments(checked)], first=2)
            outs = stage["outs"]
            outs.clear()
            outs.extend(checked_params_path(later) for later in checked)
    return yaml, document


def _dumped(repo: Path) -> str:
    yaml, document = rendered(repo)
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    return buffer.getvalue()


def is_fresh(repo: Path) -> bool:
    return (repo / DVC_YAML).read_text(encoding="utf-8") == _dumped(repo)


def write(repo: Path) -> bool:
    """Rewrite dvc.yaml's code deps; True when it changed."""
    text = _dumped(repo)
    if (repo / DVC_YAML).read_text(encoding="utf-8") == text:
        return False
    write_text(repo / DVC_YAML, text)
    return True
