"""The answers link: fresh prompts put to a live server and recomputed here from a run's verified weights
(``solomon.lineage.answers`` draws and compares them). It audits any server, Solomon's or another's, and names the
run whose weights answer among several (``identify``)."""

from __future__ import annotations

from pathlib import Path

from solomon.errors import SolomonError
from solomon.lineage.answers import Verdict, check_completions, check_texts, draw
from solomon.lineage.client import Broken, Completions, claimed_precision, invocations
from solomon.serving.generate import Completer
from solomon.serving.loader import Served, load_verified


def load_run(run_dir: Path, root: Path) -> Served:
    """``run_dir``'s weights, verified, to challenge a server with; Broken("answers") where the run does not verify."""
    try:
        return load_verified(run_dir, root)
    except SolomonError as exc:
        raise Broken("answers", f"the run's weights do not load: {exc}") from None


def challenge(
    url: str, run: Served, precision: str | None = None, tolerance: float | None = None
) -> tuple[Verdict, str]:
    """Fresh prompts to the server at ``url`` against ``run``'s weights: the verdict and its nonce. ``url`` ending in
    ``/invocations`` is MLflow's scoring endpoint (text only); anything else is the base of an OpenAI-style server.
    ``precision`` is what the server computes in (default: what its /v1/provenance says, else fp32): it sets the
    tolerance only, so a server claiming bf16 is held to the looser bound, never excused; ``tolerance`` replaces it
    (a server of another implementation, whose kernels round otherwise)."""
    drawn = draw(run.tokenizer)
    base = url.rstrip("/")
    if base.endswith("/invocations"):
        completer, tokens = Completer(run), drawn.answer_tokens
        local = lambda prompt, seed: completer.complete(prompt, tokens, seed=seed)  # noqa: E731
        return check_texts(drawn, lambda prompts, seeds: invocations(base, prompts, seeds, tokens), local), drawn.nonce
    precision = precision or claimed_precision(base)
    ask = Completions(f"{base}/v1/completions")
    try:
        verdict = check_completions(
            drawn, ask, run.model, run.tokenizer, run.stop_id, precision=precision, tolerance=tolerance
        )
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:  # what a server sent, mis-shaped
        raise Broken("answers", f"{base}/v1/completions answered choices of another shape ({exc})") from None
    return verdict, drawn.nonce


def answers_link(
    url: str, run: Served, precision: str | None = None, tolerance: float | None = None
) -> tuple[str, str]:
    """The chain's last link: ``run`` challenged at ``url``; raises Broken when the answers leave its weights."""
    verdict, nonce = challenge(url, run, precision, tolerance)
    if not verdict.holds:
        raise Broken("answers", f"{verdict.line()} (nonce {nonce})")
    return "answers", f"{verdict.line()} (nonce {nonce})"


def identify(
    url: str, run_dirs: list[Path], root: Path, precision: str | None = None, tolerance: float | None = None
) -> list[tuple[str, str]]:
    """Each candidate run's verdict against the server at ``url``, as (run, verdict line) pairs."""
    table = []
    precision = precision or claimed_precision(url.rstrip("/"))  # once, not once a candidate
    for run_dir in run_dirs:
        try:
            verdict, _ = challenge(url, load_run(run_dir, root), precision, tolerance)
            table.append((run_dir.name, ("holds: " if verdict.holds else "no: ") + verdict.line()))
        except Broken as broken:
            table.append((run_dir.name, f"no: {broken}"))
    return table
