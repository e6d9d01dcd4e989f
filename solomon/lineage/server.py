"""``solomon lineage``: from a live server (or an export) back to the corpus, every link checked.

traffic (a completion's ``system_fingerprint`` and the server's provenance agree) → image (the digest the
deployment gave the server, when it did) → registry version and alias (its ``manifest.sha256`` tag is the
digest the server serves) → then the tail ``run_links`` shares with an export's chain
(``solomon.lineage.export``): manifest (the run directory verifies against that digest, every subject hashed) →
run id (server, registry tag and manifest agree) → weights (the server's SHA256 is the manifest's), tokenizer,
corpus, params, git commit, requirements lock (as the verified manifest records them) → answers: fresh challenge
prompts answered by the server and recomputed here from the run's verified weights (``solomon.lineage.answers``),
the one link that rests on what the server computes rather than on what it says.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

from solomon import records
from solomon.audit.verify import summary, verify
from solomon.audit.workspace import IN_CACHE
from solomon.errors import SolomonError
from solomon.git_origin import uncommitted_note
from solomon.lineage.answers import TOLERANCES, Verdict, check_completions, check_texts, draw
from solomon.records import RunFiles
from solomon.serving.generate import Completer
from solomon.serving.limits import IMAGE_DIGEST_ENV
from solomon.serving.loader import load_verified


class Broken(Exception):
    """A link of the chain that does not hold: ``link`` names it."""

    def __init__(self, link: str, why: str) -> None:
        super().__init__(f"{link}: {why}")
        self.link = link


HTTP_TIMEOUT_S = 60.0  # for a whole exchange with a server: a server that answers byte by byte is cut off too


def _http(url: str, body: dict | None = None, timeout: float = HTTP_TIMEOUT_S) -> dict:
    """POST ``body`` (GET without one) to ``url``; the answer's JSON object, or Broken("traffic") in one line."""
    outcome: dict = {}

    def exchange() -> None:
        try:
            outcome["answer"] = _exchange(url, body, timeout)
        except Broken as broken:
            outcome["broken"] = broken

    # urlopen's timeout bounds each socket read, not the exchange: a thread bounds the whole (daemon: one left
    # reading a trickle never holds the command's exit)
    worker = threading.Thread(target=exchange, daemon=True)
    worker.start()
    worker.join(timeout)
    if "broken" in outcome:
        raise outcome["broken"]
    if "answer" not in outcome:
        raise Broken("traffic", f"{url}: no whole answer within {timeout:g} s")
    return outcome["answer"]


def _exchange(url: str, body: dict | None, timeout: float) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    try:
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            found = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        said = " ".join(exc.read()[:200].decode(errors="replace").split())
        raise Broken("traffic", f"{url} answered {exc.code}: {said}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError, RecursionError) as exc:
        raise Broken("traffic", f"{url}: no JSON answer ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(found, dict):
        raise Broken("traffic", f"{url}: answered JSON {type(found).__name__}, not an object")
    return found


def _subject_line(statement: dict, role: str) -> str:
    found = [s for s in statement["subject"] if s["annotations"]["role"] == role]
    return ", ".join(f"{s['name']} sha256 {s['digest']['sha256']}" for s in found) or "(none)"


def lineage(
    url: str, reference: str, root: Path, precision: str | None = None, tolerance: float | None = None
) -> list[tuple[str, str]]:
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
    chain += run_links(version.run_dir, served, root, ids, ("server", provenance.get("weights_sha256")))
    precision = precision or _precision_of(provenance)  # read above already: not asked again
    return [*chain, answers_link(url, version.run_dir, root, served, precision, tolerance)]


def answers_link(
    url: str,
    run_dir: Path,
    root: Path,
    digest: str | None = None,
    precision: str | None = None,
    tolerance: float | None = None,
) -> tuple[str, str]:
    """The answers link: ``run_dir`` (verified, against ``digest`` when given) challenged at ``url``; raises Broken
    when the answers leave its weights."""
    verdict, nonce = challenge(url, run_dir, root, digest, precision, tolerance)
    if not verdict.holds:
        raise Broken("answers", f"{verdict.line()} (nonce {nonce})")
    return "answers", f"{verdict.line()} (nonce {nonce})"


def challenge(
    url: str,
    run_dir: Path,
    root: Path,
    digest: str | None = None,
    precision: str | None = None,
    tolerance: float | None = None,
) -> tuple[Verdict, str]:
    """Fresh prompts to the server at ``url`` against ``run_dir``'s verified weights: the verdict and its nonce.
    ``url`` ending in ``/invocations`` is MLflow's scoring endpoint (text only); anything else is the base of an
    OpenAI-style server. ``precision`` is what the server computes in (default: what its /v1/provenance says, else
    fp32): it sets the tolerance only, so a server claiming bf16 is held to the looser bound, never excused;
    ``tolerance`` replaces it (a server of another implementation, whose kernels round otherwise)."""
    try:
        served = load_verified(run_dir, root, expect_digest=digest)
    except SolomonError as exc:  # the run does not verify
        raise Broken("answers", f"the run's weights do not load: {exc}") from None
    drawn = draw(served.tokenizer)
    base = url.rstrip("/")
    args = (served.model, served.tokenizer, served.stop_id)
    if base.endswith("/invocations"):
        completer = Completer(served)
        tokens = drawn.answer_tokens
        local = lambda prompt, seed: completer.complete(prompt, tokens, seed=seed)  # noqa: E731
        return check_texts(drawn, lambda prompts, seeds: _invocations(base, prompts, seeds, tokens), local), drawn.nonce
    precision = precision or _claimed_precision(base)
    ask = _Completions(f"{base}/v1/completions")
    try:
        return check_completions(drawn, ask, *args, precision=precision, tolerance=tolerance), drawn.nonce
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:  # what a server sent, mis-shaped
        raise Broken("answers", f"{base}/v1/completions answered choices of another shape ({exc})") from None


NEUTRAL = {"repeat_penalty": 1.0}  # what a challenge sets where a server accepts it (see _Completions)


class _Completions:
    """Posts a challenge's completions. Some servers bend greedy decoding by default (llama-cpp-python's server
    penalises repeated tokens by 1.1), so each body asks for plain greedy first with ``NEUTRAL``; a server that
    refuses a field it does not know (as Solomon's does, with a 400) gets the plain body from then on."""

    def __init__(self, url: str) -> None:
        self.url, self.extra = url, dict(NEUTRAL)

    def __call__(self, body: dict) -> dict:
        try:
            answer = _http(self.url, body | self.extra)
        except Broken as refused:
            if not self.extra or f"{self.url} answered 400" not in str(refused):
                raise
            self.extra = {}
            answer = _http(self.url, body)
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise Broken("answers", f"{self.url} answered no choices: not an OpenAI-style completion")
        return answer


def _claimed_precision(base: str) -> str:
    try:
        return _precision_of(_http(f"{base}/v1/provenance"))
    except Broken:
        return "fp32"


def _precision_of(provenance: dict) -> str:
    """The precision a server's provenance names, where it names one with a tolerance here; else fp32."""
    claimed = provenance.get("precision")
    return claimed if claimed in TOLERANCES else "fp32"


def _invocations(url: str, prompts: list[str], seeds: list[int], tokens: int) -> list[str]:
    """Each prompt sampled with its seed (the run's own temperature and top-k) by MLflow's pyfunc server."""
    texts = []
    for prompt, seed in zip(prompts, seeds, strict=True):
        body = {
            "dataframe_split": {"columns": ["prompt"], "data": [[prompt]]},
            "params": {"max_tokens": tokens, "seed": seed},
        }
        predictions = _http(url, body).get("predictions")
        if not isinstance(predictions, list) or len(predictions) != 1:
            raise Broken("answers", f"{url} answered no list of one prediction")
        texts.append(str(predictions[0]))
    return texts


def identify(
    url: str, run_dirs: list[Path], root: Path, precision: str | None = None, tolerance: float | None = None
) -> list[tuple[str, str]]:
    """Each candidate run's verdict against the server at ``url``, as (run, verdict line) pairs."""
    table = []
    precision = precision or _claimed_precision(url.rstrip("/"))  # once, not once a candidate
    for run_dir in run_dirs:
        try:
            verdict, _ = challenge(url, run_dir, root, None, precision, tolerance)
            table.append((run_dir.name, ("holds: " if verdict.holds else "no: ") + verdict.line()))
        except Broken as broken:
            table.append((run_dir.name, f"no: {broken}"))
    return table


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
