"""The GGUF export run by llama.cpp itself (llama-cpp-python, issue 29): llama.cpp's tokenizer gives the run's
token ids, its fp32 logits match Solomon's forward, and greedy decoding with its own KV cache gives Solomon's
greedy tokens. `make gguf-check` builds llama-cpp-python (.ci/llama-cpp, minutes) and runs this; elsewhere it
skips, naming that target (`make test` reads the GGUF back with `gguf` alone: tests/test_export.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import latest_run_dir

from lab.families import FAMILIES
from solomon.data.tokens import load_tokenizer
from solomon.export.gguf_file import export_gguf
from solomon.model import weights
from solomon.model.sampling import generate

PROMPTS = ("In the beginning", "And the LORD said unto Moses", "Blessed are")
GREEDY_TOKENS = 32
LOGIT_TOLERANCE = 1e-3  # fp32 both ways; llama.cpp's own GEMM kernels sum in another order than torch's
LLAMA_TOLERANCE = 1e-4  # the llama family's (issue 47's bound)
F32 = 0  # ggml's type id of float32

pytestmark = pytest.mark.slow
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        if os.environ.get("SOLOMON_GGUF_CHECK") == "1":
            raise  # `make gguf-check` put a build on PYTHONPATH: not finding it is a failure
        pytest.skip("llama-cpp-python is not installed: `make gguf-check` builds it (minutes) and runs this")
    return llama_cpp


def llama_greedy(model, ids: list[int], count: int, eod: int) -> list[int]:
    """Greedy tokens by llama.cpp: the prompt evaluated once, then one token at a time through its KV cache."""
    model.reset()
    model.eval(ids)
    tokens: list[int] = []
    while len(tokens) < count:
        token = int(np.argmax(model.scores[model.n_tokens - 1]))
        if token == eod:
            break
        tokens.append(token)
        model.eval([token])
    return tokens


@pytest.mark.parametrize("family", list(FAMILIES))
def test_llama_cpp_runs_the_gguf_export_with_solomons_tokens_logits_and_greedy_text(
    llama_cpp, family_repo, tmp_path: Path, family: str
) -> None:
    repo = family_repo(family)
    path = export_gguf(latest_run_dir(repo), repo, tmp_path / "gguf")
    ours = weights.load(repo / "models")
    tokenizer = load_tokenizer(repo / "data/tokenizer.json")
    eod = tokenizer.token_to_id("<|endoftext|>")
    block = ours.config.block_size
    theirs = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=block,
        n_batch=block,
        n_threads=1,
        logits_all=True,
        verbose=False,
        seed=0,
        type_k=F32,  # the KV cache in fp32, as Solomon's (llama.cpp's default is f16)
        type_v=F32,
    )
    assert theirs.n_vocab() == ours.config.vocab_size and theirs.token_eos() == eod
    worst = 0.0
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt).ids
        assert theirs.tokenize(prompt.encode(), add_bos=False, special=False) == ids, prompt
        theirs.reset()
        theirs.eval(ids)
        with torch.no_grad():
            logits = ours(torch.tensor([ids]))[0].numpy()
        worst = max(worst, float(np.abs(np.asarray(theirs.scores[: len(ids)]) - logits).max()))
        count = min(GREEDY_TOKENS, block - len(ids))  # llama.cpp stops at the context length
        expected = generate(ours, ids, count, 1.0, 1, torch.Generator().manual_seed(0), stop_id=eod)
        assert llama_greedy(theirs, ids, count, eod) == expected[:count], prompt
        assert theirs.detokenize(expected).decode() == tokenizer.decode(expected), prompt
    print(f"llama.cpp {llama_cpp.__version__} vs Solomon ({family}), max abs logit difference (fp32): {worst:.3g}")
    assert worst < (LOGIT_TOLERANCE if family == "gpt2" else LLAMA_TOLERANCE)


def test_llama_cpps_own_server_on_the_gguf_answers_as_the_run_and_not_as_another(
    llama_cpp, repo_copy: Path, tmp_path: Path
) -> None:
    """`python -m llama_cpp.server` on a run's GGUF export, challenged from its answers alone: it holds for that run
    within llama.cpp's measured fp32 difference and is caught when challenged as another run's."""
    import subprocess
    import sys

    from conftest import dvc, wait_until
    from serve_helpers import SOLOMON, free_port

    from lab.scratch import write_params
    from solomon.pipeline import pipeline_env

    first = latest_run_dir(repo_copy)
    path = export_gguf(first, repo_copy, tmp_path / "gguf")
    write_params(repo_copy, {"train": {"seed": 7}})
    dvc(repo_copy, "repro")
    second = latest_run_dir(repo_copy)
    assert second != first
    block = weights.load(repo_copy / "models").config.block_size
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", str(block), "--n_threads", "1", "--logits_all", "true", "--verbose", "false"],
        env=pipeline_env(), stdout=subprocess.DEVNULL, stderr=open(tmp_path / "llama.log", "w"), text=True,  # noqa: SIM115
    )  # fmt: skip
    try:
        wait_until(lambda: _models(port), "llama.cpp's server to answer", process=server, timeout=120, interval=1)
        url = f"http://127.0.0.1:{port}"
        tolerance = str(2 * LOGIT_TOLERANCE)  # |Δ logprob| ≤ |Δ logit| + |Δ log-sum-exp| ≤ 2 max |Δ logit|

        def lineage(run: Path) -> subprocess.CompletedProcess:
            return subprocess.run(
                [SOLOMON, "lineage", "--url", url, "--answers-only", "--run", run.name, "--tolerance", tolerance],
                cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True,
            )  # fmt: skip

        holds = lineage(first)
        print(holds.stdout)
        assert holds.returncode == 0 and "tokens equal over 8 fresh prompts, max |Δ logprob|" in holds.stdout
        caught = lineage(second)
        print(caught.stdout)
        assert caught.returncode == 1 and caught.stdout.startswith("lineage broken at answers: prompt "), caught.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)


def _models(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False
