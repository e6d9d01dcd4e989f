"""The serving section's in-process rows on the bench's random weights: Solomon's old serial path, its engine
without the HTTP stack (the like-for-like row beside transformers' ``generate``), and two peers
loading the same weights through Solomon's own exporters — Hugging Face ``transformers`` (the export's class,
``generate`` with its KV cache) and llama.cpp (``llama_cpp`` on the GGUF file), where it can be imported.

The exporters take a ``solomon.export.source.ExportSource``; here it is one over files written to a scratch directory
from the random model, **unverified** (no manifest, no audit chain: its run id, manifest and hashes say so). The
tensors and metadata are what ``solomon export`` would write for a run with these weights.
"""

import copy
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from lab.bench.serving import SAMPLES, percentile
from solomon import records
from solomon.export import gguf_file, hf
from solomon.export.layout import exported, slots
from solomon.export.source import ExportSource
from solomon.model import weights
from solomon.model.gpt import GPT
from solomon.model.sampling import generate
from solomon.params import Params
from solomon.records import RunFiles
from solomon.serving.engine import Engine, Sequence
from solomon.serving.limits import DEFAULT_DECODE
from solomon.serving.precision import in_precision

UNVERIFIED = "unverified: random weights of the bench"
LLAMA_CPP_MISSING = (
    "llama_cpp is not importable here: `make gguf-check` builds it (.ci/llama-cpp); add the directory it prints "
    "to PYTHONPATH"
)


def unverified_source(model: GPT, tokenizer: Path, work: Path) -> ExportSource:
    """A ExportSource over ``model`` written to ``work`` with ``tokenizer`` and default hyperparameters; unverified."""
    weights.save(model, work / "model")
    hyper = work / RunFiles.HYPERPARAMETERS
    hyper.write_text(yaml.safe_dump(Params().model_dump(mode="json")), encoding="utf-8")
    files = {
        records.WEIGHTS: work / "model" / weights.WEIGHTS_FILE,
        records.MODEL_CONFIG: work / "model" / weights.CONFIG_FILE,
        records.TOKENIZER: tokenizer,
        RunFiles.HYPERPARAMETERS: hyper,
    }
    return ExportSource(
        run_dir=work,
        run_id="bench-random-weights-unverified",
        manifest_sha256="0" * 64,
        files=files,
        sha256=dict.fromkeys(files, UNVERIFIED),
        git={},
    )


def timed(run: Callable[[], int], requests: int, batch: int) -> dict:
    """``run`` (one call generates ``batch`` sequences and returns its new tokens) once to warm up, then
    ``requests`` times: tokens/s over them all, and each call's latency."""
    run()
    latencies, tokens = [], 0
    for _ in range(requests):
        started = time.perf_counter()
        tokens += run()
        latencies.append(time.perf_counter() - started)
    return {
        "batch": batch,
        "requests": requests * batch,
        "tokens_per_s": round(tokens / sum(latencies), 1),
        "requests_per_s": round(requests * batch / sum(latencies), 3),
        "p50_latency_s": round(percentile(latencies, 0.5), 4),
        "p95_latency_s": round(percentile(latencies, 0.95), 4),
        "errors": 0,
    }


def reference_row(model: GPT, prompt_ids: list[int], max_tokens: int, requests: int) -> dict:
    """``solomon.model.sampling.generate``: the whole window through ``GPT.forward`` per token, one sequence."""
    generator = torch.Generator().manual_seed(0)

    def run() -> int:
        return len(generate(model, prompt_ids, max_tokens, SAMPLES["temperature"], SAMPLES["top_k"], generator))

    return timed(run, requests, batch=1)


def engine_rows(
    model: GPT,
    precision: str,
    prompt_ids: list[int],
    max_tokens: int,
    requests: int,
    batches: tuple[int, ...],
    slots: int,
    decode: str = DEFAULT_DECODE,
) -> list[dict]:
    """The engine the server runs (``slots`` slots, its start-up check, ``precision``, its ``decode`` route),
    called in this process: ``batch`` sequences submitted at once and stepped until done, no HTTP, no event
    loop, no client. A compiled engine's rows say how long its start-up took (``start_s``)."""
    engine = Engine(in_precision(copy.deepcopy(model), precision), slots, decode=decode)
    rows = []
    for batch in batches:

        def run(batch=batch) -> int:
            for seed in range(batch):
                engine.submit(
                    Sequence(list(prompt_ids), max_tokens, SAMPLES["temperature"], SAMPLES["top_k"], seed,
                             on_token=lambda token, logits: True, on_finish=lambda reason: None)
                )  # fmt: skip
            while engine.busy():
                engine.step()
            return batch * max_tokens  # no stop token: every sequence makes max_tokens

        rows.append(timed(run, requests, batch) | ({"start_s": round(engine.compile_s, 1)} if engine.compile_s else {}))
    return rows


def hf_model(source: ExportSource):
    """The export's transformers class (its config's ``architectures``) from its config and its tensors in Hugging
    Face's layout (fp32)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {key: value for key, value in hf.config(source).items() if key != "solomon"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**fields)).eval()
    tensors = {slot.hf: exported(slot, source.state, hf=True) for slot in slots(source.model.config)}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # the output projection is tied to the embedding
        name = type(model).__name__
        raise RuntimeError(f"the export's tensors do not fit {name}: {missing} missing, {unexpected} extra")
    model.tie_weights()
    return model


def hf_rows(
    source: ExportSource,
    prompt_ids: list[int],
    max_tokens: int,
    requests: int,
    batches: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
):
    """transformers' ``generate`` (sampled, KV cache) at each batch, the model cast to ``dtype`` as
    ``torch_dtype=`` would (every weight and activation); the largest logit difference from Solomon's own fp32
    forward on the prompt, the proof that it is the same model."""
    model = hf_model(source).to(dtype)
    prompt = torch.tensor([prompt_ids])
    with torch.no_grad():
        diff = float((model(prompt).logits.float() - source.model(prompt)[0]).abs().max())
    rows = []
    for batch in batches:
        ids = prompt.repeat(batch, 1)

        def run(ids=ids, batch=batch) -> int:
            with torch.no_grad():
                out = model.generate(
                    ids, attention_mask=torch.ones_like(ids), do_sample=True, use_cache=True, **SAMPLES,
                    max_new_tokens=max_tokens, min_new_tokens=max_tokens, pad_token_id=source.eod_id,
                )  # fmt: skip
            return (out.shape[1] - ids.shape[1]) * batch

        rows.append(timed(run, requests, batch) | {"max_abs_logit_diff": diff})
    return rows


def llama_cpp_row(
    source: ExportSource, work: Path, prompt_ids: list[int], max_tokens: int, requests: int, threads: int
):
    """llama.cpp on the GGUF file ``solomon export --format gguf`` would write, one sequence; skipped, with the
    reason, where ``llama_cpp`` is not importable or cannot load it."""
    try:
        import llama_cpp
    except ImportError:
        return {"batch": 1, "skipped": LLAMA_CPP_MISSING}
    path = work / gguf_file.GGUF_FILE
    gguf_file.write_file(path, source)
    try:
        llm = llama_cpp.Llama(
            str(path), n_ctx=source.model.config.block_size, n_threads=threads, n_threads_batch=threads,
            seed=0, verbose=False,
        )  # fmt: skip
    except (ValueError, RuntimeError) as exc:
        return {"batch": 1, "skipped": f"llama.cpp {llama_cpp.__version__} did not load the GGUF file: {exc}"}

    def run() -> int:
        new = 0
        llm.reset()  # no prefix of the last request's cache reused: every request evaluates its prompt
        for _ in llm.generate(
            prompt_ids, top_k=SAMPLES["top_k"], top_p=1.0, min_p=0.0, temp=SAMPLES["temperature"],
            repeat_penalty=1.0, reset=True,
        ):  # fmt: skip
            new += 1  # generate does not stop at the end-of-document token: every request makes max_tokens
            if new == max_tokens:
                break
        return new

    return timed(run, requests, batch=1) | {"llama_cpp": llama_cpp.__version__}
