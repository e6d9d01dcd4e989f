"""What this machine allows a decode step, from the model's size: the rows of the serving section that no code reaches,
the ceilings the engine's tokens/s is read against.

A decode step reads every weight once, whatever its batch of B sequences, so memory allows B × bandwidth / weight
bytes tokens/s (4 bytes a weight in fp32, 2 in bf16); each token costs 2 FLOPs per parameter, so a precision's GEMM
peak allows peak / (2 × parameters) tokens/s at any batch. Both are upper bounds: attention over the KV cache,
activations and the sampling are left out, and weights that fit a cache are read faster than memory's bandwidth.
"""

import time

import torch

from lab.bench.throughput import BENCH_GEMM
from solomon.machine import gemm_peaks
from solomon.model.gpt import GPT

COPY_MIB = 512  # far larger than any CPU's last-level cache: the copy streams from and to memory


def copy_bandwidth_gbs(mib: int = COPY_MIB, rounds: int = 3) -> float:
    """GB/s of a ``mib`` MiB tensor copy (read once, written once), best of ``rounds``, at this process's threads."""
    source = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    target.copy_(source)  # first touch of the target's pages, outside the timing
    best = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        target.copy_(source)
        best = max(best, 2 * source.nbytes / (time.perf_counter() - started) / 1e9)
    return round(best, 2)


def hardware_limits(
    model: GPT, batches: tuple[int, ...], copy_mib: int = COPY_MIB, gemm: tuple[int, int] = BENCH_GEMM
) -> dict:
    """The measured bandwidth and GEMM peaks (throughput.py's measurement), and the rows they allow."""
    parameters = model.num_params(non_embedding=False)  # the tied output projection counted once: read once
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = copy_bandwidth_gbs(copy_mib)
    peaks = gemm_peaks(*gemm)
    rows = []
    for precision, size in (("fp32", 4), ("bf16", 2)):  # bytes a weight takes in that precision's decode step
        compute = round(peaks[precision] * 1e9 / (2 * parameters), 1)
        tokens = {batch: round(batch * bandwidth * 1e9 / (parameters * size), 1) for batch in batches}
        rows += [{"row": f"bandwidth limit ({precision})", "batch": b, "tokens_per_s": t} for b, t in tokens.items()]
        rows += [{"row": f"compute limit ({precision})", "batch": batch, "tokens_per_s": compute} for batch in batches]
    return {
        "parameters": parameters,
        "weight_bytes": weight_bytes,
        "copy_bandwidth_gbs": bandwidth,
        "copy_mib": copy_mib,
        "gemm_peak_gflops": peaks,
        "gemm": {"n": gemm[0], "repeats": gemm[1]},
        "rows": rows,
    }
