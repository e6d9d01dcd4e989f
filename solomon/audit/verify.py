"""``solomon verify``: recompute every SHA256 of a run's manifest and say which artifacts do not match.

Where each subject is looked for:
- files of the run directory: in the run directory;
- pipeline outputs (weights, tokenizer, splits): in the workspace while its ``dvc.lock`` still records the same
  output as the run did, otherwise in the DVC cache (``.dvc/cache``), so a run verifies months later, after the
  workspace has moved on, as long as the cache keeps its objects;
- raw corpus files: in the repository, or inside the installed package for the default corpus.

The manifest itself must be in canonical form (any hand edit breaks it) and its digest must be the one the run's
pages (``README.md``, ``index.html``) show.

The result names where each checked subject was found, so a caller that loads them (``promote``, ``generate``)
reads exactly the files that were verified, from one reading of the manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from solomon import records
from solomon.audit import manifest
from solomon.data.corpus import corpus_file
from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.records import RunFiles

DVC_CACHE = Path(".dvc/cache/files/md5")


@dataclass(frozen=True)
class Result:
    run_id: str
    digest: str  # the manifest's SHA256
    checked: int
    problems: list[str]
    files: dict[str, Path] = field(default_factory=dict)  # checked subject name -> where it was found
    statement: dict = field(default_factory=dict)  # the manifest, as read


def _outs(stages: dict) -> dict[str, str]:
    return {out["path"]: out["md5"] for entry in stages.values() for out in entry.get("outs", [])}


def _cache_object(root: Path, md5: str) -> Path:
    return root / DVC_CACHE / md5[:2] / md5[2:]


def _in_cache(root: Path, name: str, out_path: str, md5: str) -> Path | None:
    if not md5.endswith(".dir"):
        return _cache_object(root, md5)
    listing = _cache_object(root, md5)
    if not listing.is_file():
        return None
    relpath = name[len(out_path) + 1 :]
    for entry in json.loads(listing.read_text(encoding="utf-8")):
        if entry["relpath"] == relpath:
            return _cache_object(root, entry["md5"])
    return None


class Locator:
    """Finds where a subject of the manifest is now."""

    def __init__(self, run_dir: Path, root: Path, recorded_stages: dict) -> None:
        self.run_dir, self.root = run_dir, root
        self.recorded = _outs(recorded_stages)
        lock = root / records.DVC_LOCK
        self.current = _outs(manifest.dvc_stages(lock, exclude=())) if lock.is_file() else {}

    def __call__(self, subject: dict) -> tuple[Path | None, str]:
        """(path or None, where it was looked for)."""
        name, location = subject["name"], subject["annotations"]["location"]
        if location == manifest.RUN:
            return self.run_dir / name, "run directory"
        if location == manifest.CORPUS:
            try:
                return corpus_file(name, self.root), "corpus"
            except SolomonError:
                return None, "corpus (package not installed)"
        for out_path, md5 in self.recorded.items():
            if name == out_path or name.startswith(out_path + "/"):
                if not self.current or self.current.get(out_path) == md5:
                    return self.root / name, "workspace"
                return _in_cache(self.root, name, out_path, md5), "DVC cache"
        return self.root / name, "workspace"


def verify(
    run_dir: Path,
    root: Path = Path("."),
    names: set[str] | None = None,
    expect_digest: str | None = None,
    public_key: Path | None = None,
) -> Result:
    """Check the manifest of ``run_dir``: only the subjects in ``names`` when given (the manifest's own checks
    always run); ``expect_digest``, when given, must be the manifest's SHA256; with ``public_key``, the run
    directory's signature must verify. ``files`` of the result holds every checked subject that was found (whether
    or not it matched). Raises SolomonError when there is no readable manifest at all."""
    path = run_dir / RunFiles.MANIFEST
    if not path.is_file():
        raise SolomonError(f"{path} not found: pass a run directory (<report.root>/<run-id>) made by the report stage")
    data = path.read_bytes()
    try:
        statement = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SolomonError(f"{path} is not valid JSON ({exc}): the manifest was damaged or edited") from None
    digest = manifest.digest_of(data)
    problems = []
    if public_key is not None:
        from solomon.audit.signing import check

        problem = check(run_dir, public_key)
        problems += [problem] if problem else []
    if expect_digest is not None and expect_digest != digest:
        problems.append(f"{RunFiles.MANIFEST}: SHA256 {digest[:12]}… is not the expected {expect_digest[:12]}…")
    if statement.get("_type") != manifest.STATEMENT_TYPE or statement.get("predicateType") != manifest.PREDICATE_TYPE:
        problems.append(f"{RunFiles.MANIFEST}: not a Solomon in-toto statement ({manifest.PREDICATE_TYPE})")
    if manifest.encode(statement) != data:
        problems.append(f"{RunFiles.MANIFEST}: edited (its bytes are not the canonical form the report stage writes)")
    for page in RunFiles.PAGES:
        if not (run_dir / page).is_file():
            problems.append(f"{page}: missing from the run directory")
        elif digest not in (run_dir / page).read_text(encoding="utf-8", errors="replace"):
            problems.append(
                f"{RunFiles.MANIFEST}: its SHA256 {digest[:12]}… is not the one {page} shows (one of them was edited)"
            )
    predicate = statement.get("predicate", {})
    locate = Locator(run_dir, root, predicate.get("dvc", {}).get("stages", {}))
    subjects = [s for s in statement.get("subject", []) if names is None or s["name"] in names]
    if names is not None:
        problems += [f"{n}: not in the manifest" for n in sorted(names - {s["name"] for s in subjects})]
    files = {}
    for subject in subjects:
        name, expected = subject["name"], subject["digest"]["sha256"]
        found, where = locate(subject)
        if found is None or not found.is_file():
            problems.append(f"{name}: missing (looked in the {where}{f': {found}' if found else ''})")
            continue
        files[name] = found
        actual = sha256_file(found)
        if actual != expected:
            problems.append(
                f"{name}: SHA256 mismatch in the {where} ({found}): {actual[:12]}…, manifest says {expected[:12]}…"
            )
    return Result(predicate.get("run_id", run_dir.name), digest, len(subjects), problems, files, statement)
