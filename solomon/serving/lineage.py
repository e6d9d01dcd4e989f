"""``solomon lineage``: from a live server (or an export) back to the corpus, every link checked.

traffic (a completion's ``system_fingerprint`` and the server's provenance agree) → image (the digest the
deployment gave the server, when it did) → registry version and alias (its ``manifest.sha256`` tag is the
digest the server serves) → then the tail ``run_links`` shares with an export's chain
(``solomon.export.lineage``): manifest (the run directory verifies against that digest, every subject hashed) →
run id (server, registry tag and manifest agree) → weights (the server's SHA256 is the manifest's), tokenizer,
corpus, params, git commit, requirements lock (as the verified manifest records them).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from solomon import records
from solomon.audit.verify import summary, verify
from solomon.audit.workspace import IN_CACHE
from solomon.provenance import uncommitted_note
from solomon.records import RunFiles
from solomon.serving.limits import IMAGE_DIGEST_ENV


class Broken(Exception):
    """A link of the chain that does not hold: ``link`` names it."""

    def __init__(self, link: str, why: str) -> None:
        super().__init__(f"{link}: {why}")
        self.link = link


def _http(url: str, body: dict | None = None, timeout: float = 30.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise Broken("traffic", f"{url} answered {exc.code}: {exc.read()[:200].decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise Broken("traffic", f"{url}: no JSON answer ({exc})") from None


def _subject_line(statement: dict, role: str) -> str:
    found = [s for s in statement["subject"] if s["annotations"]["role"] == role]
    return ", ".join(f"{s['name']} sha256 {s['digest']['sha256']}" for s in found) or "(none)"


def lineage(url: str, reference: str, root: Path) -> list[tuple[str, str]]:
    """The chain as (link, what holds) pairs; raises Broken at the first link that does not hold."""
    from solomon.tracking.registry import resolve  # imports mlflow

    base = url.rstrip("/")
    provenance = _http(f"{base}/v1/provenance")
    served = provenance.get("manifest_sha256")
    answer = _http(f"{base}/v1/completions", {"prompt": "In", "max_tokens": 1, "seed": 0})
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

    ids = {"server": provenance.get("run_id"), "registry tag": version.run_id}
    return chain + run_links(version.run_dir, served, root, ids, ("server", provenance.get("weights_sha256")))


def run_links(
    run_dir: Path, digest: str, root: Path, ids: dict[str, str | None], weights: tuple[str, str | None]
) -> list[tuple[str, str]]:
    """The chain from a manifest on: ``run_dir`` verifies against ``digest``, every subject hashed; the run ids
    others claim (``ids``, by who claims them) are the manifest's, and so is the weights' SHA256 ``weights`` (who
    claims it, and what); then what the verified manifest records. Raises Broken at the first link that fails."""
    if not (run_dir / RunFiles.MANIFEST).is_file():
        raise Broken("manifest", f"no run directory {run_dir} here: check out the commit that holds it")
    result = verify(run_dir, root, expect_digest=digest)
    if result.problems:
        raise Broken("manifest", result.problems[0])
    cached = IN_CACHE in result.where.values()  # only where the workspace's dvc.lock records another version
    note = " (workspace's dvc.lock is another run's; outputs verified in the DVC cache)" if cached else ""
    chain = [("manifest", f"{run_dir}: {summary(result)}{note}")]

    predicate = result.statement["predicate"]
    ids = ids | {"manifest": result.run_id}
    if len(set(ids.values())) != 1:
        raise Broken("run id", ", ".join(f"{k} {v}" for k, v in ids.items()) + " differ")
    chain.append(("run id", result.run_id))

    recorded = {s["name"]: s["digest"]["sha256"] for s in result.statement["subject"]}
    who, claimed = weights
    if claimed != recorded.get(records.WEIGHTS):
        raise Broken("weights", f"{who} {claimed}, manifest {recorded.get(records.WEIGHTS)}")
    chain.append(("weights", f"{records.WEIGHTS} sha256 {recorded[records.WEIGHTS]}"))
    chain.append(("tokenizer", f"{records.TOKENIZER} sha256 {recorded[records.TOKENIZER]}"))
    source = predicate.get("corpus", {}).get("source")
    chain.append(("corpus", f"source {source}; {_subject_line(result.statement, 'raw-corpus')}"))
    chain.append(("params", _subject_line(result.statement, "hyperparameters")))
    git = predicate.get("git", {})
    chain.append(("git commit", f"{git.get('commit')}" + uncommitted_note(git)))
    chain.append(("requirements", f"requirements.lock sha256 {predicate.get('requirements_lock_sha256')}"))
    return chain
