"""Crash-safe file output: write to a temporary sibling, fsync, then rename over the target.

A reader (or a later stage) therefore sees either the old file or the complete new one, never half of it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The targets being written now: a stop (``solomon.stage``) ends the process without unwinding, so it undoes them.
_writing: set[Path] = set()


def abandon_writes() -> None:
    """Undo every write in progress, as ``tidy`` undoes a killed one: each target is left as it was before."""
    for target in list(_writing):
        tidy(target)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def no_crash(stage: str) -> None:
    pass


def tidy(target: str | Path) -> None:
    """Undo what a killed write of ``target`` left beside it: temporary siblings (``.<name>.*.tmp``) are removed,
    and a directory swap caught between its two renames is finished backwards (``.<name>.old`` becomes
    ``<name>`` again when ``<name>`` is missing, else it is removed). One writer per target is assumed."""
    target = Path(target)
    if not target.parent.is_dir():
        return
    for partial in target.parent.glob(f".{glob_escape(target.name)}.*.tmp"):
        shutil.rmtree(partial) if partial.is_dir() and not partial.is_symlink() else partial.unlink(missing_ok=True)
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, target)


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def write_with(path: str | Path, writer: Callable[[Path], None], crash_point: Callable[[str], None] = no_crash) -> None:
    """Call ``writer(tmp_path)`` and move the finished file to ``path`` atomically. ``crash_point("written")``
    runs between the two (the test hooks kill the process there)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tidy(path)
    _writing.add(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file ordinary permissions
        writer(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        crash_point("written")
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
        _writing.discard(path)


def write_bytes(path: str | Path, data: bytes, crash_point: Callable[[str], None] = no_crash) -> None:
    write_with(path, lambda tmp: tmp.write_bytes(data), crash_point)


def write_text(path: str | Path, text: str, crash_point: Callable[[str], None] = no_crash) -> None:
    write_bytes(path, text.encode("utf-8"), crash_point)


def canonical_json(obj: Any) -> str:
    """Stable JSON text: sorted keys, fixed indentation, trailing newline (same object, same bytes)."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_json(path: str | Path, obj: Any, crash_point: Callable[[str], None] = no_crash) -> None:
    write_text(path, canonical_json(obj), crash_point)


@contextmanager
def staged_dir(target: str | Path, crash_point: Callable[[str], None] = no_crash) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``target``; on success it becomes ``target``.

    On any error the temporary directory is removed and ``target`` is left exactly as it was. A kill leaves at
    worst a temporary directory or, between the two renames, ``.<name>.old`` without ``<name>``: the next write of
    ``target`` (or ``tidy``) repairs either. ``crash_point("staged")`` runs once the content is on disk and
    ``crash_point("swap")`` between the renames (the test hooks kill the process there).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tidy(target)
    _writing.add(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                with open(file, "rb+") as handle:
                    os.fsync(handle.fileno())
        crash_point("staged")
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            crash_point("swap")
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        _writing.discard(target)
