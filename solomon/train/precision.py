"""What a run computes in: ``train.precision`` resolved for this host, and what that precision sets in a step.

``auto`` (the default) resolves to bf16 where the CPU runs bf16 matmuls in oneDNN's own kernels (AVX-512 BF16, AMX,
AVX-512 BW/VL/DQ or AVX-NE-CONVERT: ``solomon.machine.bf16_matmul_native``) and to fp32 elsewhere: on an AVX2-only
CPU a bf16 matmul takes a scalar path many times slower than fp32 (docs/training.md, "Machine kinds"). One word
decides the whole step: bf16 is bf16 autocast with Muon's Newton–Schulz iterations in bf16 (torch's Muon); fp32 is
fp32 throughout, Newton–Schulz included. An explicit bf16 or fp32 is used as it is, on any host. A portable run
is fp32 (``train.portable``). The resolved precision is recorded (run record, fingerprint, machine history), so
resume refuses a host that would resolve otherwise and ``solomon replay`` computes in the recorded one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Literal

import torch

from solomon.machine import bf16_matmul_native
from solomon.params import TrainParams

Precision = Literal["bf16", "fp32"]


def resolve(setting: str, portable: bool, machine: Mapping) -> Precision:
    """``train.precision`` as this host runs it: an explicit bf16/fp32 as given, ``auto`` by ``machine``'s
    ``bf16_matmul`` (``solomon.machine.describe``); fp32 for a portable run."""
    if setting in ("bf16", "fp32"):
        return setting  # type: ignore[return-value]
    if setting != "auto":
        raise ValueError(f"train.precision {setting!r} is not one of auto, bf16, fp32")
    if portable or machine.get("bf16_matmul") != "native":
        return "fp32"
    return "bf16"


def why(setting: str, portable: bool, machine: Mapping) -> str:
    """The reason for ``resolve``'s answer, in a few words (what the check and train stages print)."""
    if setting != "auto":
        return "set explicitly"
    if portable:
        return "train.portable"
    if machine.get("bf16_matmul") == "native":
        return "this CPU has native bf16 matmuls"
    return "this CPU has no native bf16 matmuls"


def autocast_for(precision: Precision) -> Callable[[], contextlib.AbstractContextManager]:
    """The autocast context of a resolved precision: bf16 autocast on CPU, or none for fp32."""
    if precision == "bf16":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext


def newton_schulz_dtype(precision: Precision) -> torch.dtype:
    """The dtype of Muon's orthogonalisation: bf16 as torch's Muon in a bf16 run, fp32 in an fp32 one."""
    return torch.bfloat16 if precision == "bf16" else torch.float32


def bf16_fallback_warning(precision: Precision, machine: Mapping, gemm_peak: Mapping[str, float] | None) -> str | None:
    """The line the train stage prints when a run computes in bf16 (set explicitly: ``auto`` would not choose it)
    on a CPU without native bf16 matmuls: correct, but its matmuls take the scalar path. None otherwise."""
    if precision != "bf16" or machine.get("bf16_matmul", "native") == "native":
        return None
    measured = ""
    if gemm_peak:
        measured = f" (bf16 GEMM {gemm_peak['bf16']:g} GFLOP/s against {gemm_peak['fp32']:g} in fp32 here)"
    return (
        f"train: this CPU has no native bf16 matmuls{measured} and train.precision: bf16 computes in bf16: steps "
        "run many times slower than in fp32; train.precision: auto (or fp32) trains in fp32 here "
        "(other bytes; docs/training.md)"
    )


def for_this_host(cfg: TrainParams) -> Precision:
    """``cfg``'s precision as this process's CPU resolves it (for code without a machine record at hand)."""
    return resolve(cfg.precision, cfg.portable, {"bf16_matmul": "native" if bf16_matmul_native() else "fallback"})
