"""verify's checks against the repository: the workspace's claim (its ``dvc.lock`` against the stage entries the
run recorded) and the hashes, each subject hashed where it is found — the run directory, the corpus, the workspace
while its ``dvc.lock`` records the run's version of an output, otherwise the DVC cache."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from solomon import records
from solomon.audit import manifest
from solomon.audit.checks import PACKAGE_CORPUS, name_problem
from solomon.data.sources import corpus_file
from solomon.errors import SolomonError
from solomon.hashing import sha256_file

DVC_CACHE = Path(".dvc/cache/files/md5")

# Where a checked subject was found.
IN_RUN_DIR, IN_WORKSPACE, IN_CACHE, IN_CORPUS = "run directory", "workspace", "DVC cache", "corpus"


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


@dataclass
class Claim:
    """The workspace's claim: how its dvc.lock differs from the run's record, and the stage entries it holds
    (None without a dvc.lock: workspace files are then hashed where they are)."""

    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    current: dict | None = None


def check_workspace_claim(run_dir: Path, root: Path, recorded: dict, dvc_lock: bool = True) -> Claim:
    """``root``'s dvc.lock against the stage entries the run ``recorded``. Without one, a run that recorded one is
    a difference — nothing here says any more how the workspace's files were made — unless ``dvc_lock`` is False:
    the root is declared to hold only the run's files (the serving image), and no dvc.lock is read."""
    lock = root / records.DVC_LOCK
    in_place = "workspace files were hashed where they are"
    if not dvc_lock and lock.is_file():
        return Claim(
            notes=[f"{records.DVC_LOCK}: not read (the root is declared to hold the run's files only); {in_place}"]
        )
    if not dvc_lock or not (lock.is_file() or recorded):
        return Claim(notes=[f"{records.DVC_LOCK}: none under the root; {in_place}"])
    if not lock.is_file():
        restore = f"git checkout $(git log -1 --format=%h -- {run_dir}) -- {records.DVC_LOCK}"
        return Claim(
            [
                f"{records.DVC_LOCK}: missing from the workspace, so nothing here says how its files were made; "
                f"restore the one committed with the run ({restore})"
            ]
        )
    try:
        current = manifest.dvc_stages(lock, exclude=())
    except (yaml.YAMLError, AttributeError, UnicodeDecodeError) as exc:
        return Claim(lock_differences(recorded, {}), [f"{records.DVC_LOCK}: unreadable ({type(exc).__name__})"], {})
    return Claim(lock_differences(recorded, current), current=current)


@dataclass
class Hashed:
    """The hashes check: its problems, and where each checked subject was found (whether or not it matched)."""

    checked: int
    problems: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)


def check_hashes(subjects: list[dict], names: set[str] | None, locate: Locator) -> Hashed:
    """Every confined subject (those in ``names`` when given) has the SHA256 the manifest records, where
    ``locate`` finds it; a symlink out of the run directory or repository is refused even when its bytes match."""
    asked = [s for s in subjects if names is None or s["name"] in names]
    confined = [s for s in asked if name_problem(s["name"], s["annotations"]["location"]) is None]
    done = Hashed(len(confined))
    if names is not None:
        done.problems += [f"{n}: not in the manifest" for n in sorted(names - {s["name"] for s in subjects})]
    for subject in confined:
        name, expected = subject["name"], subject["digest"]["sha256"]
        found, place = locate(subject)
        if found is None or not found.is_file():
            done.problems.append(f"{name}: missing (looked in the {place}{f': {found}' if found else ''})")
            continue
        if locate.escapes(subject, found):
            inside = IN_RUN_DIR if place == IN_RUN_DIR else "repository"
            done.problems.append(f"{name}: a symlink out of the {inside} (to {found.resolve()})")
            continue
        done.files[name], done.where[name] = found, place
        actual = sha256_file(found)
        if actual != expected:
            done.problems.append(
                f"{name}: SHA256 mismatch in the {place} ({found}): {actual[:12]}…, manifest says {expected[:12]}…"
            )
    return done
