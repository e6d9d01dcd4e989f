"""The serving section of ``make bench`` in one run, side by side on the same random weights (the default model
size, seed 0), the same torch threads and the same 32 new tokens per request (sampled alike: temperature 0.8,
top-k 40, no stop token):

1. the old serial path in process (``solomon.model.sampling.generate``: the whole window per token), batch 1;
2. the engine through the real server (a ``serve_random_model`` process on loopback), in each precision (fp32,
   bf16), at 1, 4 and 16 closed-loop clients streaming their completions: requests/s, new tokens/s, p50/p95
   latency to ``data: [DONE]``, time to the first chunk carrying text, errors (each client keeps its connection
   open from one request to the next, as OpenAI's client does); the decode batch each load runs
   (the smallest of the sizes the engine's start-up check kept that holds the clients);
3. the same engine in process (``lab.bench.peers.engine_rows``: no HTTP, no event loop, no client on
   the same cores), in each precision at batch 1 and 16, on each decode route (eager, and compiled, with its
   start-up time): the like-for-like row beside transformers' ``generate``;
4. the hardware's limits for the model's size (``lab.bench.roofline``) at batch 1 and 16;
5. peers on the same weights through Solomon's exporters (``lab.bench.peers``): transformers at batch
   1 and 16 in fp32 and in bf16 (``torch_dtype``'s cast: every weight and activation), llama.cpp at batch 1 where
   ``llama_cpp`` imports;

each row's tokens/s also as a ratio to the fp32 engine's at the same batch (the peers compute in fp32).
"""

import contextlib
import http.client
import tempfile
from pathlib import Path

import torch

from lab.bench import NOT_NATIVE, SERVING_CLIENTS, SERVING_REQUESTS, peers, roofline
from lab.bench.serving import (
    MAX_TOKENS,
    PROMPT,
    bench_tokenizer,
    decode_batch_sizes,
    engine_load,
    random_model,
    random_model_server,
    served_weights,
    stream_completion,
    weights_digest,
)
from lab.bench.throughput import BENCH_GEMM
from solomon import machine
from solomon.data.tokens import load_tokenizer
from solomon.errors import SolomonError
from solomon.export import hf
from solomon.params import ModelParams
from solomon.runtime import configure_torch
from solomon.serving.engine import decode_batch
from solomon.serving.limits import DECODES, DEFAULT_DECODE, PRECISIONS, Limits

ENGINE = "engine (HTTP server, streamed)"


def serving_section(
    clients: tuple[int, ...] = SERVING_CLIENTS,
    requests_per_client: int = SERVING_REQUESTS,
    threads: int = 1,
    slots: int = Limits.slots,
    model: dict | None = None,
    max_tokens: int = MAX_TOKENS,
    peer_requests: int = 3,
    copy_mib: int = roofline.COPY_MIB,
    gemm: tuple[int, int] = BENCH_GEMM,
    precisions: tuple[str, ...] | None = None,
    bf16_native: bool | None = None,
    decodes: tuple[str, ...] = DECODES,
) -> dict:
    """Every row of the section (``model``: ModelParams fields, None for the defaults; the rest as named);
    ``peer_requests`` timed calls per in-process row after one warm-up; ``precisions``: the engine's (None: every
    serving precision); ``bf16_native``: whether bf16 matmuls do (None: this CPU's) — where
    they do not, the bf16 rows are left out, with the reason; ``decodes``: the in-process engine's routes
    (``solomon serve --decode``)."""
    native = machine.bf16_matmul_native() if bf16_native is None else bf16_native
    left_out = () if native else ("bf16",)  # named as rows with the reason, never measured
    precisions = tuple(p for p in (precisions or PRECISIONS) if p not in left_out)
    configure_torch(threads)
    dims = ModelParams(**(model or {})).model_dump()
    with tempfile.TemporaryDirectory(prefix="solomon-bench-serve-") as scratch:
        work = Path(scratch)
        tokenizer_path = bench_tokenizer(work)
        tokenizer = load_tokenizer(tokenizer_path)
        reference = random_model(tokenizer.get_vocab_size(), model)
        digest = weights_digest(reference)
        prompt_ids = tokenizer.encode(PROMPT).ids
        batches = tuple(sorted({1, max(clients)}))
        hardware = roofline.hardware_limits(reference, batches, copy_mib, gemm)
        rows, kept = [], {}
        rows += [{"row": f"{ENGINE}, {p}", "batch": 1, "skipped": NOT_NATIVE} for p in left_out]
        for precision in precisions:
            with random_model_server(tokenizer_path, threads, model, slots, precision) as server:
                port = server.port
                if served_weights(port) != digest:
                    raise SolomonError("the bench server's random weights are not the in-process model's")
                kept[precision] = decode_batch_sizes(port)
                with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=600)) as warm_up:
                    stream_completion(warm_up, max_tokens, seed=0)
                for count in clients:
                    load = engine_load(port, count, requests_per_client, max_tokens)
                    decoded = decode_batch(tuple(kept[precision]), min(count, slots))
                    plural = "s" if count > 1 else ""
                    name = f"{ENGINE}, {precision}, {count} client{plural} (decode batch {decoded})"
                    rows.append({"row": name, "precision": precision} | load)
        for precision in precisions:
            for decode in decodes:
                route = "" if decode == DEFAULT_DECODE else f", {decode}"
                in_process = {"row": f"engine in process, {precision}{route} (no HTTP)", "precision": precision}
                engine = peers.engine_rows(
                    reference, precision, prompt_ids, max_tokens, peer_requests, batches, slots, decode
                )
                rows += [in_process | row for row in engine]
        rows.append(
            {"row": "old serial path (sampling.generate, whole window per token)"}
            | peers.reference_row(reference, prompt_ids, max_tokens, peer_requests)
        )
        (work / "export").mkdir()
        source = peers.unverified_source(reference, tokenizer_path, work / "export")
        architecture = hf.config(source)["architectures"][0]
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            peer = {"row": f"transformers generate, {name} ({architecture}, KV cache)", "precision": name}
            if name in left_out:
                rows.append(peer | {"batch": 1, "skipped": NOT_NATIVE})
                continue
            rows += [peer | row for row in peers.hf_rows(source, prompt_ids, max_tokens, peer_requests, batches, dtype)]
        rows.append(
            {"row": "llama.cpp (llama_cpp, GGUF fp32)"}
            | peers.llama_cpp_row(source, work, prompt_ids, max_tokens, peer_requests, threads)
        )
    rows += hardware.pop("rows")
    engine = {
        row["batch"]: row["tokens_per_s"] for row in rows if row.get("precision") == "fp32" and ENGINE in row["row"]
    }
    for row in rows:
        if "tokens_per_s" in row and engine.get(row["batch"]):
            row["ratio_to_engine"] = round(row["tokens_per_s"] / engine[row["batch"]], 3)
    described = machine.describe()
    return {
        "model": dims | {"vocab_size": tokenizer.get_vocab_size(), "weights_sha256": digest},
        "host": {key: described.get(key) for key in ("cpu", "family", "model", "kind")},
        "threads": threads,
        "slots": slots,
        "decode_batch_sizes": kept,
        "max_tokens": max_tokens,
        "prompt": PROMPT,
        "prompt_tokens": len(prompt_ids),
        "requests_per_client": requests_per_client,
        "hardware": hardware,
        "rows": sorted(rows, key=lambda row: row["batch"]),  # stable: per batch the engine, serial path, peers, limits
    }


def _figure(row: dict, key: str):
    value = row.get(key)
    return "" if value is None else value


def format_serving(section: dict) -> str:
    """The host, the peaks, and one table of every row; a skipped row's reason under it."""
    from tabulate import tabulate

    model, host, hardware = section["model"], section["host"], section["hardware"]
    peaks = hardware["gemm_peak_gflops"]
    lines = [
        f"\nserving: {model['n_layer']} × {model['n_embd']} model, vocabulary {model['vocab_size']}, "
        f"{hardware['parameters']:,} parameters (random weights of seed 0), {section['threads']} thread(s), --slots "
        f"{section['slots']}, {section['max_tokens']} new tokens per request after {section['prompt_tokens']} "
        f"prompt tokens",
        f"host: {host['cpu']} (cpu family {host['family']}, model {host['model']}); GEMM peak fp32 {peaks['fp32']}, "
        f"bf16 {peaks['bf16']} GFLOP/s; copy bandwidth {hardware['copy_bandwidth_gbs']} GB/s; weights "
        f"{hardware['weight_bytes'] / 2**20:.1f} MiB in fp32, half that in bf16",
    ]
    keys = ("batch", "requests", "tokens_per_s", "ratio_to_engine", "requests_per_s", "p50_latency_s",
            "p95_latency_s", "ttft_p50_s", "errors")  # fmt: skip
    rows = [[row["row"], *(_figure(row, key) for key in keys)] for row in section["rows"]]
    headers = ["row", "batch", "requests", "new tokens/s", "× engine", "requests/s", "p50 s", "p95 s", "TTFT p50 s",
               "errors"]  # fmt: skip
    floats = ("", "", "", ",.1f", ".2f", ".2f", ".3f", ".3f", ".3f", "")
    lines.append(tabulate(rows, headers, tablefmt="github", floatfmt=floats))
    lines += [f"not measured: {row['row']}: {row['skipped']}" for row in section["rows"] if row.get("skipped")]
    starts = {row["row"]: row["start_s"] for row in section["rows"] if "start_s" in row}
    lines += [f"start-up (compiling every batch size, then the check): {row}: {s} s" for row, s in starts.items()]
    return "\n".join(lines)
