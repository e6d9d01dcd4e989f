"""docs/layout.md, written from the code: every module of solomon/, stages/ and lab/ with its docstring's first
sentence, the product package's modules on the floors the architecture test declares.

``python -m lab.layout`` writes the page (``--check``: exit 1 if it is stale); tests/test_readme.py fails when the
page differs from what ``layout_page`` gives now, so the page cannot drift from the code.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Sequence
from pathlib import Path

# (name, package) from the ground up, as tests/test_architecture.py declares them; package None is the ground floor
# (the package's top-level modules).
Floors = Sequence[tuple[str, str | None]]

ROOT = Path(__file__).resolve().parent.parent
PAGE = Path("docs") / "layout.md"
FLOORS_DECLARED_IN = Path("tests") / "test_architecture.py"

# A sentence ends at . ? or ! followed by white space and a capital, a backtick or a quote (not "e.g. the", not
# "et al. 2017").
SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`\"'(])")

HEADER = """\
# Layout

<!-- Written by `python -m lab.layout` from the code; do not edit. tests/test_readme.py fails when it is stale. -->

Every module of Solomon with its one job: the first sentence of the module's own docstring.

- `solomon/` is the product: what a user runs to train, audit, track, export and serve. It is built in floors,
  listed here from the ground up: a module imports only from its own floor and the floors listed before it, and the
  `solomon` command (`top`) sits above them all ([tests/test_architecture.py](../tests/test_architecture.py) holds
  the rule and declares the floors).
- `stages/` are the seven DVC stage scripts: each wires its part of `params.yaml` to the library, which never
  imports a stage.
- `lab/` is the tooling for developing and measuring Solomon (`python -m lab <command>`, run by `make` targets):
  benchmarks, soak, chaos, smoke, the docs experiments, the nanoGPT comparison, the written files. It imports the
  product; the product never imports it.
"""


def first_sentence(path: Path) -> str:
    """The first sentence of a module's docstring, on one line, as Markdown (``x`` becomes `x`)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not docstring or not docstring.strip():
        raise ValueError(f"{path} has no docstring: its first sentence says the module's one job")
    paragraph = " ".join(docstring.strip().split("\n\n", 1)[0].split())
    sentence = SENTENCE_END.split(paragraph, maxsplit=1)[0]
    if sentence.endswith(":"):  # a sentence that introduces a list: the list stays in the docstring
        sentence = sentence[:-1] + "."
    return sentence.replace("``", "`").replace("|", "\\|")


def module_name(relative: Path) -> str:
    """``solomon/train/loop.py`` → ``solomon.train.loop``."""
    return ".".join(relative.with_suffix("").parts)


def floor_index(module: str, floors: Floors, top: str) -> int:
    """The floor a product module stands on: the last floor whose package holds it, else the ground; ``top`` (the
    command line) above every floor, as ``len(floors)``."""
    if module == top or module.startswith(f"{top}.") or module == "solomon.__main__":  # `python -m solomon`
        return len(floors)
    for index in reversed(range(len(floors))):
        package = floors[index][1]
        if package and (module == package or module.startswith(f"{package}.")):
            return index
    return 0


def modules(root: Path, directory: str) -> list[Path]:
    """The modules under ``root/directory`` (package ``__init__`` files left out), relative to ``root``, sorted."""
    paths = (root / directory).rglob("*.py")
    return sorted(p.relative_to(root) for p in paths if p.name != "__init__.py" and "__pycache__" not in p.parts)


def _row(floor: str, path: Path, root: Path) -> str:
    return f"| {floor} | `{path.as_posix()}` | {first_sentence(root / path)} |"


def layout_page(root: Path, floors: Floors, top: str = "solomon.cli") -> str:
    """docs/layout.md for the tree at ``root``: the product's modules floor by floor from the ground up (``top``
    last), then the stage scripts, then the lab's modules."""
    names = [name for name, _ in floors] + ["top"]
    product = sorted(modules(root, "solomon"), key=lambda p: (floor_index(module_name(p), floors, top), p))
    rows = [_row(names[floor_index(module_name(p), floors, top)], p, root) for p in product]
    rows += [_row("stage", p, root) for p in modules(root, "stages")]
    rows += [_row("lab", p, root) for p in modules(root, "lab")]
    return "\n".join([HEADER, "| floor | module | its one job |", "|---|---|---|", *rows, ""])


def declared_floors(test_file: Path) -> tuple[tuple[tuple[str, str | None], ...], str]:
    """``FLOORS`` and ``TOP`` as the architecture test declares them, read as literals (the test is not imported)."""
    values = {}
    for node in ast.parse(test_file.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in ("FLOORS", "TOP"):
            values[target.id] = ast.literal_eval(node.value)
    missing = {"FLOORS", "TOP"} - values.keys()
    if missing:
        raise ValueError(f"{test_file} declares no {', '.join(sorted(missing))} as a literal")
    return tuple(tuple(floor) for floor in values["FLOORS"]), values["TOP"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.layout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this checkout)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is stale")
    args = parser.parse_args(argv)
    floors, top = declared_floors(args.root / FLOORS_DECLARED_IN)
    page, text = args.root / PAGE, layout_page(args.root, floors, top)
    if args.check:
        fresh = page.exists() and page.read_text(encoding="utf-8") == text
        print(f"{PAGE}: {'fresh' if fresh else 'stale: run python -m lab.layout'}")
        return 0 if fresh else 1
    page.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
