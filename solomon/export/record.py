"""An export's ``provenance.json``: which run, which manifest, the SHA256 of each run file it was made from and of
each file it holds; and the rule for ``--out``: a new directory, or an earlier export of the same run."""

from __future__ import annotations

import json
from pathlib import Path

from solomon import __version__
from solomon.atomic import write_json
from solomon.errors import SolomonError
from solomon.export import FORMATS
from solomon.export.source import ExportSource
from solomon.hashing import sha256_file

PROVENANCE = "provenance.json"
KIND = "solomon-export"


def exported_files(export_dir: Path) -> dict[str, str]:
    """SHA256 of every file of the export but provenance.json, by its relative POSIX path."""
    return {
        path.relative_to(export_dir).as_posix(): sha256_file(path)
        for path in sorted(export_dir.rglob("*"))
        if path.is_file() and path.relative_to(export_dir).as_posix() != PROVENANCE
    }


def write(export_dir: Path, source: ExportSource, fmt: str) -> None:
    """provenance.json, over the files already written to ``export_dir``."""
    write_json(
        export_dir / PROVENANCE,
        {
            "kind": KIND,
            "format": fmt,
            "run_id": source.run_id,
            "manifest_sha256": source.manifest_sha256,
            "git": source.git,
            "sources": source.sha256,
            "files": exported_files(export_dir),
            "solomon_version": __version__,
        },
    )


def read(export_dir: Path) -> dict:
    """The export's record; SolomonError (one line) when there is none or it is not one."""
    path = export_dir / PROVENANCE
    if not path.is_file():
        raise SolomonError(f"{path}: missing: {export_dir} is not a Solomon export (`solomon export` writes one)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        ok = record.get("kind") == KIND and record.get("format") in FORMATS
        ok = ok and all(isinstance(record.get(k), str) for k in ("run_id", "manifest_sha256"))
        ok = ok and all(isinstance(record.get(k), dict) for k in ("sources", "files"))
    except (ValueError, UnicodeDecodeError, AttributeError):
        ok = False
    if not ok:
        raise SolomonError(f"{path}: not a Solomon export record (kind, format, run id, manifest, sources, files)")
    return record


def check_files(export_dir: Path, provenance: dict, expected: set[str]) -> dict[str, str]:
    """Every file of ``export_dir`` has the SHA256 provenance.json records, and its files are ``expected``: none
    missing, none added. Returns the SHA256 of each, by name."""
    listed, found = provenance["files"], exported_files(export_dir)
    for name in sorted(set(listed) | expected | set(found)):
        if name not in found:
            raise SolomonError(f"{export_dir / name}: missing from the export")
        if name not in listed or name not in expected:
            raise SolomonError(f"{export_dir / name}: not a file of a {provenance['format']} export (an added file)")
        if found[name] != listed[name]:
            raise SolomonError(
                f"{export_dir / name}: SHA256 mismatch ({found[name][:12]}…, provenance.json says {listed[name][:12]}…)"
            )
    return found


def check_out(out: Path, run_id: str) -> None:
    """Refuse an ``--out`` that exists and is not an earlier export of this run (nor an empty directory)."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        return
    try:
        earlier = read(out) if out.is_dir() else None
    except SolomonError:
        earlier = None
    if earlier is None or earlier["run_id"] != run_id:
        what = f"an export of another run ({earlier['run_id']})" if earlier else "not a Solomon export"
        raise SolomonError(
            f"--out {out} exists and is {what}: give a new directory (only an export of {run_id} is replaced)"
        )
