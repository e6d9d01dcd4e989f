"""The lineage's side of an exchange with a server it audits: whole answers within a time bound, every failure as a
``Broken`` link in one line, and the two shapes a challenge is asked in — OpenAI-style ``/v1/completions`` and
MLflow's ``/invocations``."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request

from solomon.lineage.answers import TOLERANCES


class Broken(Exception):
    """A link of the chain that does not hold: ``link`` names it."""

    def __init__(self, link: str, why: str) -> None:
        super().__init__(f"{link}: {why}")
        self.link = link


HTTP_TIMEOUT_S = 60.0  # for a whole exchange with a server: a server that answers byte by byte is cut off too


def http_json(url: str, body: dict | None = None, timeout: float = HTTP_TIMEOUT_S) -> dict:
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


NEUTRAL = {"repeat_penalty": 1.0}  # what a challenge sets where a server accepts it (see Completions)


class Completions:
    """Posts a challenge's completions. Some servers bend greedy decoding by default (llama-cpp-python's server
    penalises repeated tokens by 1.1), so each body asks for plain greedy first with ``NEUTRAL``; a server that
    refuses a field it does not know (as Solomon's does, with a 400) gets the plain body from then on."""

    def __init__(self, url: str) -> None:
        self.url, self.extra = url, dict(NEUTRAL)

    def __call__(self, body: dict) -> dict:
        try:
            answer = http_json(self.url, body | self.extra)
        except Broken as refused:
            if not self.extra or f"{self.url} answered 400" not in str(refused):
                raise
            self.extra = {}
            answer = http_json(self.url, body)
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise Broken("answers", f"{self.url} answered no choices: not an OpenAI-style completion")
        return answer


def invocations(url: str, prompts: list[str], seeds: list[int], tokens: int) -> list[str]:
    """Each prompt sampled with its seed (the run's own temperature and top-k) by MLflow's pyfunc server."""
    texts = []
    for prompt, seed in zip(prompts, seeds, strict=True):
        body = {
            "dataframe_split": {"columns": ["prompt"], "data": [[prompt]]},
            "params": {"max_tokens": tokens, "seed": seed},
        }
        predictions = http_json(url, body).get("predictions")
        if not isinstance(predictions, list) or len(predictions) != 1:
            raise Broken("answers", f"{url} answered no list of one prediction")
        texts.append(str(predictions[0]))
    return texts


def precision_of(provenance: dict) -> str:
    """The precision a server's provenance names, where it names one with a tolerance here; else fp32."""
    claimed = provenance.get("precision")
    return claimed if claimed in TOLERANCES else "fp32"


def claimed_precision(base: str) -> str:
    """What the server at ``base`` says it computes in (its ``/v1/provenance``); fp32 where it says nothing."""
    try:
        return precision_of(http_json(f"{base}/v1/provenance"))
    except Broken:
        return "fp32"
