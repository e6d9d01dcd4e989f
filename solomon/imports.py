"""Which of Solomon's own source files a script or module runs: its import closure inside the package.

Read from the source (``ast``), never by importing, so it is cheap and has no side effects. The train
fingerprint hashes this closure, and a test holds dvc.yaml's code dependencies to it, so the code a stage
depends on is derived, never listed by hand.
"""

from __future__ import annotations

import ast
from pathlib import Path

import solomon

PACKAGE = "solomon"
PACKAGE_DIR = Path(solomon.__file__).resolve().parent


def module_path(module: str) -> Path | None:
    """The source file of ``solomon.x.y`` (a module or a package's ``__init__``); None when there is none."""
    relative = Path(*module.split(".")[1:])
    for candidate in (PACKAGE_DIR / relative.with_suffix(".py"), PACKAGE_DIR / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path: Path) -> set[str]:
    """Package modules that ``path`` imports, anywhere in the file (a lazy import inside a function counts)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            found.add(node.module)
            # `from solomon.x import y` may name a submodule y
            found |= {
                f"{node.module}.{alias.name}" for alias in node.names if module_path(f"{node.module}.{alias.name}")
            }
    return found


def closure(script: Path, exclude: tuple[str, ...] = ()) -> list[Path]:
    """Every package source file ``script`` runs, sorted: itself when it is one, its imports, theirs, and each
    imported module's parent packages (``__init__.py`` runs first). Modules under a name in ``exclude`` (and what
    only they import) are left out."""
    script = script.resolve()
    seen: set[Path] = {script} if script.is_relative_to(PACKAGE_DIR) else set()
    pending = [script]
    while pending:
        path = pending.pop()
        for module in _imported_modules(path):
            if any(module == name or module.startswith(f"{name}.") for name in exclude):
                continue
            parts = module.split(".")
            for depth in range(2, len(parts) + 1):  # solomon.a.b runs solomon/a/__init__.py first
                found = module_path(".".join(parts[:depth]))
                if found is not None and found not in seen:
                    seen.add(found)
                    pending.append(found)
    return sorted(seen)


def relative_names(paths: list[Path]) -> list[str]:
    """``solomon/...`` names, as dvc.yaml and the fingerprint write them."""
    return [f"{PACKAGE}/{path.relative_to(PACKAGE_DIR).as_posix()}" for path in paths]
