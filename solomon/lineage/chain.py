"""``solomon lineage``: from a live server (``server_chain``) or an export on disk (``export_chain``) back to the
corpus, each link checked in the order it prints.

A server's chain: traffic (a completion's ``system_fingerprint`` and the server's provenance agree) → image (the
digest the deployment gave the server, when it did) → registry version and alias (its ``manifest.sha256`` tag is
the digest the server serves). An export's: export (``solomon verify --export``: its provenance.json names a run
of this workspace, every file and tensor is that run's). Both go on with the run's links (``run_links``): manifest
(the run directory verifies against that digest, every subject hashed) → run id (every claimant and the manifest
agree) → weights (the claimed SHA256 is the manifest's), tokenizer, corpus, params, git commit, requirements lock
(as the verified manifest records them). A server's chain ends with the answers (``solomon.lineage.challenge``):
fresh prompts answered by the server and recomputed here from the weights that verified, the one link that rests
on what the server computes rather than on what it says.
"""

from __future__ import annotations

from pathlib import Path

from solomon import records
from solomon.audit.verify import Result, summary, verify
from solomon.audit.workspace import IN_CACHE
from solomon.errors import SolomonError
from solomon.export import record
from solomon.export.check import run_dir_of, verify_export
from solomon.git_origin import uncommitted_note
from solomon.lineage.challenge import answers_link
from solomon.lineage.client import Broken, http_json, precision_of
from solomon.records import RunFiles
from solomon.serving.limits import IMAGE_DIGEST_ENV
from solomon.serving.loader import load_from

Chain = list[tuple[str, str]]  # (link, what holds), in the order checked


def server_chain(
    url: str, reference: str, root: Path, precision: str | None = None, tolerance: float | None = None
) -> Chain:
    """The chain of the server at ``url``, which must serve ``reference`` (models:/<name>@<alias>); raises Broken at
    the first link that does not hold."""
    from solomon.tracking.registry import resolve  # imports mlflow

    base = url.rstrip("/")
    provenance = http_json(f"{base}/v1/provenance")
    served = provenance.get("manifest_sha256")
    answer = http_json(f"{base}/v1/completions", {"prompt": "In", "max_tokens": 1, "seed": 0})
    if answer.get("system_fingerprint") != served:
        raise Broken("traffic", f"completions carry {answer.get('system_fingerprint')}, provenance says {served}")
    chain = [("traffic", f"{base}: completions carry system_fingerprint {served}, as /v1/provenance says")]
    image = provenance.get("image_digest")
    chain.append(("image", image or f"(not given to the server: set {IMAGE_DIGEST_ENV} in the deployment)"))

    try:
        version = resolve(reference, root)
    except Exception as exc:
        raise Broken("registry", str(exc)) from None
    if version.manifest_sha256 != served:
        raise Broken(
            "registry",
            f"{reference} is version {version.version} (manifest {version.manifest_sha256}), "
            f"the server serves manifest {served} (run {provenance.get('run_id')})",
        )
    chain.append(("registry", f"{reference} = version {version.version}, tag manifest.sha256 {served}"))

    verified = verified_run(version.run_dir, served, root)
    ids = {"server": provenance.get("run_id"), "registry tag": version.run_id}
    chain += run_links(version.run_dir, verified, ids, ("server", provenance.get("weights_sha256")))
    precision = precision or precision_of(provenance)  # read above already: not asked again
    return [*chain, answers_link(url, load_from(verified), precision, tolerance)]


def export_chain(export_dir: Path, root: Path) -> Chain:
    """The chain of the export in ``export_dir``; raises Broken at the first link that does not hold."""
    try:
        exported = verify_export(export_dir, root)
    except SolomonError as exc:
        raise Broken("export", str(exc)) from None
    provenance = record.read(export_dir)
    run_dir = run_dir_of(export_dir, root, provenance["run_id"])
    verified = verified_run(run_dir, provenance["manifest_sha256"], root)
    ids, weights = {"export": provenance["run_id"]}, ("export", provenance["sources"].get(records.WEIGHTS))
    return [("export", exported), *run_links(run_dir, verified, ids, weights)]


def verified_run(run_dir: Path, digest: str, root: Path) -> Result:
    """``run_dir`` verified against the manifest ``digest``, every subject hashed; Broken("manifest") otherwise."""
    if not (run_dir / RunFiles.MANIFEST).is_file():
        raise Broken("manifest", f"no run directory {run_dir} here: check out the commit that holds it")
    result = verify(run_dir, root, expect_digest=digest)
    if result.problems:
        raise Broken("manifest", result.problems[0])
    return result


def run_links(run_dir: Path, verified: Result, ids: dict[str, str | None], weights: tuple[str, str | None]) -> Chain:
    """The chain from ``run_dir``'s manifest, ``verified``, on: the run ids others claim (``ids``, by who claims
    them) are the manifest's, and so is the weights' SHA256 (``weights``: who claims it, and what); then what the
    manifest records. Raises Broken at the first link that fails."""
    cached = IN_CACHE in verified.where.values()  # only where the workspace's dvc.lock records another version
    note = " (workspace's dvc.lock is another run's; outputs verified in the DVC cache)" if cached else ""
    chain = [("manifest", f"{run_dir}: {summary(verified)}{note}")]

    ids = ids | {"manifest": verified.run_id}
    if len(set(ids.values())) != 1:
        raise Broken("run id", ", ".join(f"{k} {v}" for k, v in ids.items()) + " differ")
    chain.append(("run id", verified.run_id))

    recorded = {s["name"]: s["digest"]["sha256"] for s in verified.statement["subject"]}
    who, claimed = weights
    if claimed != recorded.get(records.WEIGHTS):
        raise Broken("weights", f"{who} {claimed}, manifest {recorded.get(records.WEIGHTS)}")
    chain.append(("weights", f"{records.WEIGHTS} sha256 {recorded[records.WEIGHTS]}"))
    chain.append(("tokenizer", f"{records.TOKENIZER} sha256 {recorded[records.TOKENIZER]}"))
    predicate = verified.statement["predicate"]
    source = predicate.get("corpus", {}).get("source")
    chain.append(("corpus", f"source {source}; {_subject_line(verified.statement, 'raw-corpus')}"))
    chain.append(("params", _subject_line(verified.statement, "hyperparameters")))
    git = predicate.get("git", {})
    chain.append(("git commit", f"{git.get('commit')}" + uncommitted_note(git)))
    chain.append(("requirements", f"requirements.lock sha256 {predicate.get('requirements_lock_sha256')}"))
    return chain


def _subject_line(statement: dict, role: str) -> str:
    found = [s for s in statement["subject"] if s["annotations"]["role"] == role]
    return ", ".join(f"{s['name']} sha256 {s['digest']['sha256']}" for s in found) or "(none)"
