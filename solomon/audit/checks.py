"""verify's checks of the manifest and the run directory, each a function that returns what it found: the manifest
itself (form, pages, expected digest, signature), confinement, completeness and identity. The checks that look
at the workspace — its claim and the hashes — are in ``solomon.audit.workspace``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from solomon import records
from solomon.audit import manifest
from solomon.data.sources import KJV_DISTRIBUTION, KJV_RESOURCE
from solomon.records import RunFiles

PACKAGE_CORPUS = f"{KJV_DISTRIBUTION}:{KJV_RESOURCE}"  # the default corpus: a resource of an installed package

# Files of the run directory that are not subjects, each bound another way (see solomon.audit.verify).
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


@dataclass
class Findings:
    """What one check found: problems fail the run; notes say what was not checked, and why."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_manifest(
    run_dir: Path, data: bytes, statement: dict, expect_digest: str | None, public_key: Path | None
) -> Findings:
    """The manifest is what it claims: signed by ``public_key`` (and the promotion record too, when signed) when
    given, the ``expect_digest`` when given, a Solomon statement in canonical form, and the digest both pages
    show."""
    digest = manifest.digest_of(data)
    found = Findings()
    if public_key is not None:
        from solomon.audit.signing import check, check_promotion

        found.problems += [p for p in [check(run_dir, public_key)] if p]
        if (run_dir / RunFiles.PROMOTION).is_file():
            if (run_dir / RunFiles.PROMOTION_SIGNATURE).is_file():
                found.problems += [p for p in [check_promotion(run_dir, public_key)] if p]
            else:
                found.notes.append(
                    f"{RunFiles.PROMOTION}: not signed (compare its SHA256 with the registry tag promotion.sha256)"
                )
    elif (run_dir / RunFiles.SIGNATURE).is_file():
        found.notes.append(f"{RunFiles.SIGNATURE}: present, not checked (give --public-key)")
    if expect_digest is not None and expect_digest != digest:
        found.problems.append(f"{RunFiles.MANIFEST}: SHA256 {digest[:12]}… is not the expected {expect_digest[:12]}…")
    if statement.get("_type") != manifest.STATEMENT_TYPE or statement.get("predicateType") != manifest.PREDICATE_TYPE:
        found.problems.append(f"{RunFiles.MANIFEST}: not a Solomon in-toto statement ({manifest.PREDICATE_TYPE})")
    if manifest.encode(statement) != data:
        found.problems.append(
            f"{RunFiles.MANIFEST}: edited (its bytes are not the canonical form the report stage writes)"
        )
    for page in RunFiles.PAGES:
        if not (run_dir / page).is_file():
            found.problems.append(f"{page}: missing from the run directory")
        elif digest not in (run_dir / page).read_text(encoding="utf-8", errors="replace"):
            found.problems.append(
                f"{RunFiles.MANIFEST}: its SHA256 {digest[:12]}… is not the one {page} shows (one of them was edited)"
            )
    return found


def _shape_problem(index: int, subject: object) -> str | None:
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


def listed_subjects(statement: dict) -> tuple[list[dict], list[str]]:
    """(the well-formed subjects, a problem for each one that is not): only the former are checked further."""
    listed = statement.get("subject")
    listed = listed if isinstance(listed, list) else []
    shape = [_shape_problem(i, s) for i, s in enumerate(listed)]
    return [s for s, p in zip(listed, shape, strict=True) if p is None], [p for p in shape if p]


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


def check_confinement(subjects: list[dict]) -> list[str]:
    """Every subject name stays inside the run directory or the repository (symlinks are refused where the
    hashes are checked, once each file is found)."""
    found = (name_problem(s["name"], s["annotations"]["location"]) for s in subjects)
    return [problem for problem in found if problem]


def run_dir_files(run_dir: Path) -> list[str]:
    """Every file (and symlink) below ``run_dir``, relative POSIX paths; symlinked directories are not entered."""
    found = []
    for folder, dirs, files in os.walk(run_dir):
        base = Path(folder).relative_to(run_dir)
        found += [(base / name).as_posix() for name in files]
        found += [(base / name).as_posix() for name in dirs if (Path(folder) / name).is_symlink()]
    return sorted(found)


def check_completeness(run_dir: Path, subjects: list[dict]) -> list[str]:
    """Every role a run is made of is among the subjects, and every file of the run directory is a subject or
    bound another way."""
    present = {(s["annotations"]["role"], s["name"], s["annotations"]["location"]) for s in subjects}
    roles = {(role, location) for role, _, location in present}
    problems = []
    for role, name, location in REQUIRED_SUBJECTS:
        if (role, name, location) not in present if name else (role, location) not in roles:
            what = f"{name} ({role})" if name else f"{role} subject"
            problems.append(f"{RunFiles.MANIFEST}: lists no {what}; every run has one")
    in_run = {s["name"] for s in subjects if s["annotations"]["location"] == manifest.RUN}
    return problems + [
        f"{name}: in the run directory but not in the manifest (an added file)"
        for name in run_dir_files(run_dir)
        if name not in in_run and name not in BOUND_OTHERWISE
    ]


def _promotion(run_dir: Path, run_id: str, digest: str) -> Findings:
    """The promotion record names this run (a record moved from another run fails); one that names an earlier
    manifest of this run (the report was rebuilt after the promotion) is said, not failed."""
    path = run_dir / RunFiles.PROMOTION
    if not path.is_file():
        orphan = (run_dir / RunFiles.PROMOTION_SIGNATURE).exists()
        return Findings([f"{RunFiles.PROMOTION_SIGNATURE}: a signature without {RunFiles.PROMOTION}"] if orphan else [])
    try:
        record = records.read_json(path)
        promoted_run, promoted_digest = str(record["run_id"]), str(record["manifest_sha256"])
    except (ValueError, KeyError, TypeError):
        return Findings([f"{RunFiles.PROMOTION}: not a promotion record (no run_id and manifest_sha256)"])
    if promoted_run != run_id:
        return Findings(
            [f"{RunFiles.PROMOTION}: records the promotion of run {promoted_run}, not of this run {run_id}"]
        )
    if promoted_digest != digest:
        return Findings(
            notes=[
                f"{RunFiles.PROMOTION}: records an earlier manifest of this run ({promoted_digest[:12]}…), not this one"
            ]
        )
    return Findings()


def check_identity(run_dir: Path, predicate: dict, digest: str) -> Findings:
    """The run id of the manifest, of ``run.json`` and the run directory's name are one, and the promotion record,
    when there is one, names this run."""
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
    promotion = _promotion(run_dir, str(predicate.get("run_id", run_dir.name)), digest)
    return Findings(problems + promotion.problems, promotion.notes)
