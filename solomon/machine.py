"""The machine kind: what selects the numerics of a CPU run, as one dict and a short ``kind`` string.

torch and its libraries pick their kernels at run time from the CPU's instruction sets: ATen's vectorised ops by
the capability torch reports (``DEFAULT``, ``AVX2``, ``AVX512``; capped by ``ATEN_CPU_CAPABILITY``), oneDNN's bf16
matmuls by AMX, AVX-512 BF16, AVX-512 or AVX2 (capped by ``ONEDNN_MAX_CPU_ISA``), MKL's fp32 GEMMs likewise. Two
machines of the same kind run the same kernels, so a run is bit-identical on both (threads being equal: a param,
``train.threads``); on another kind the float sums are ordered differently and the last bits differ. The kind names
what decides that — architecture, the microarchitecture (vendor, CPU family and model: two with the same ISA
flags still differ in speed, and a run's speed is read against its kind), torch's capability, the best bf16-relevant
ISA, AMX or not, the oneDNN version — and not the CPU's marketing name, which the dict keeps for the record. The
host's measured GEMM peak (``gemm_peaks``) is the reference for a run's speed; ``make bench`` measures it at length.
"""

from __future__ import annotations

import math
import os
import platform
import re
import time
from functools import cache
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")
# The flags (Linux /proc/cpuinfo names) that choose bf16/fp32 kernels on x86, best first.
ISA_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "avx2", "fma")
BEST_OF = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")  # the one the kind names
# On 64-bit ARM (Linux /proc/cpuinfo's Features; macOS's hw.optional.arm.FEAT_* in the same words): the vector
# extensions torch's and oneDNN's kernels choose by, and BF16, which torch's bf16 matmul check reads there.
ARM = ("aarch64", "arm64")
ARM_ISA_FLAGS = ("sve2", "sve", "bf16", "i8mm", "asimd")
ARM_BEST_OF = ("sve2", "sve", "asimd")
# Variables that cap the kernels torch and oneDNN choose (a machine can be made to run as a lesser kind).
PEAK_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # the precisions whose GEMM peak is measured
CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


# /proc/cpuinfo's fields that name the microarchitecture (x86: e.g. AuthenticAMD, family 25, model 17 is Zen 4;
# ARM: implementer 0x41, part 0xd40 is Arm's Neoverse V1).
MICROARCHITECTURE = {
    "vendor_id": "vendor",
    "cpu family": "family",
    "model": "model",
    "CPU implementer": "implementer",
    "CPU part": "part",
}


def parse_cpuinfo(text: str) -> tuple[str, set[str], dict[str, str]]:
    """(CPU model name, instruction-set flags, microarchitecture) of /proc/cpuinfo's first processor."""
    model, flags, micro = "", set(), {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key in MICROARCHITECTURE and MICROARCHITECTURE[key] not in micro:
            micro[MICROARCHITECTURE[key]] = value.strip()
    return model, flags, micro


def _cpuinfo() -> tuple[str, set[str], dict[str, str]]:
    """``parse_cpuinfo`` of this machine (macOS: its sysctl names); the platform's words for a missing name."""
    try:
        model, flags, micro = parse_cpuinfo(CPUINFO.read_text(encoding="utf-8"))
    except OSError:
        model, flags, micro = "", set(), {}
    if platform.system() == "Darwin" and platform.machine() in ARM:
        model, flags = _sysctl("machdep.cpu.brand_string") or model, _darwin_arm_flags()
    return model or platform.processor() or platform.machine(), flags, micro


def _sysctl(name: str) -> str:
    import subprocess

    done = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def _darwin_arm_flags() -> set[str]:
    """Apple silicon's features in Linux's words: Advanced SIMD always, the rest as hw.optional.arm.FEAT_* say."""
    return {"asimd"} | {
        flag for flag in ("bf16", "i8mm", "sve", "sve2") if _sysctl(f"hw.optional.arm.FEAT_{flag.upper()}") == "1"
    }


@cache
def _library_versions() -> dict[str, str | None]:
    """oneDNN's and MKL's versions as torch's build configuration states them (None when not built in)."""
    config = torch.__config__.show()
    onednn = re.search(r"(?:oneDNN|MKL-DNN) v?([0-9][0-9.]*)", config)
    mkl = re.search(r"Math Kernel Library Version ([0-9][0-9.]*)", config)
    return {"onednn": onednn.group(1) if onednn else None, "mkl": mkl.group(1) if mkl else None}


def cpu_model() -> str:
    return _cpuinfo()[0]


def bf16_matmul_native() -> bool:
    """Whether this CPU runs bf16 matmuls in oneDNN's own kernels (AMX, AVX-512 BF16, AVX-512 BW/VL/DQ or
    AVX-NE-CONVERT): torch's own test of the requirement its packed bf16 linear layers state. Without them (an
    AVX2-only CPU such as AMD Zen 3) a bf16 matmul falls back to a scalar path, orders of magnitude slower than
    fp32: correct, but the default bf16 run unusable (docs/training.md, "Machine kinds", has the figures)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check is not None and torch.backends.mkldnn.is_available() and check())


def describe() -> dict:
    """This process's machine: what selects its kernels, and its ``kind``. Threads are not in it: they are a param
    (``train.threads``, ``eval.threads``) and recorded as one."""
    model, flags, micro = _cpuinfo()
    caps = {name: os.environ[name] for name in CAPS if name in os.environ}
    machine = {
        "arch": platform.machine(),
        "cpu": model,
        **micro,
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "isa": [flag for flag in (ARM_ISA_FLAGS if platform.machine() in ARM else ISA_FLAGS) if flag in flags],
        "bf16_matmul": "native" if bf16_matmul_native() else "fallback",
        **_library_versions(),
        "torch": str(torch.__version__),
        "caps": caps,
    }
    return {**machine, "kind": kind(machine)}


def kind(machine: dict) -> str:
    """E.g. ``x86_64 AuthenticAMD family 25 model 17, avx512_bf16 (no AMX), torch AVX512, oneDNN 3.12.0``."""
    isa = set(machine.get("isa", []))
    best = next((flag for flag in BEST_OF if flag in isa), "no AVX2")
    if machine.get("arch") in ARM:
        best = next((flag for flag in ARM_BEST_OF if flag in isa), "no SIMD") + (
            " bf16" if "bf16" in isa else " (no BF16)"
        )
    amx = "" if best == "amx_bf16" or machine.get("arch") not in ("x86_64", "AMD64") else " (no AMX)"
    caps = machine.get("caps") or {}
    capped = "".join(f", {name}={value}" for name, value in sorted(caps.items()) if name != "ATEN_CPU_CAPABILITY")
    onednn = f", oneDNN {machine['onednn']}" if machine.get("onednn") else ""
    micro = " ".join(
        f"{field} {machine[field]}" if field != "vendor" else machine[field]
        for field in MICROARCHITECTURE.values()
        if machine.get(field)
    )
    micro = f" {micro}," if micro else ""
    return f"{machine.get('arch')}{micro} {best}{amx}, torch {machine.get('torch_capability')}{onednn}{capped}"


def matmul_flops(shapes: list[tuple[int, int, int]]) -> int:
    """Floating-point operations of (M, K) @ (K, N) matmuls: a multiply and an add per term."""
    return sum(2 * m * k * n for m, k, n in shapes)


BEST_OF_ROUNDS = 3


def best_gflops(operands: list[tuple[torch.Tensor, torch.Tensor]], repeats: int, rounds: int = BEST_OF_ROUNDS) -> float:
    """The best of ``rounds`` timings (a shared machine has noisy neighbours; the peak is the point)."""
    for a, b in operands:
        a @ b
    flops = matmul_flops([(a.size(0), a.size(1), b.size(1)) for a, b in operands]) * repeats
    best = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(repeats):
            for a, b in operands:
                a @ b
        best = max(best, flops / (time.perf_counter() - started) / 1e9)
    return best


def square_operands(n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(dtype)
    b = torch.randn(n, n, generator=torch.Generator().manual_seed(1)).to(dtype)
    return a, b


def gemm_peak_gflops(dtype: torch.dtype, n: int = 1024, repeats: int = 3, budget_s: float = 1.0) -> float:
    """GFLOP/s of an ``n``×``n`` square matmul in ``dtype`` at this process's thread count. The defaults are sized
    to take well under ``budget_s`` for both precisions where the CPU has kernels for them, since the train stage
    measures this as it starts; ``make bench`` passes larger ones. Where the products would outlast ``budget_s``
    (bf16 on a CPU without native bf16 matmuls, where one 1024² product alone does: docs/training.md), ``n`` shrinks
    to fit, as a 256² probe's rate predicts: a slow path's rate hardly depends on the size."""
    probe = min(n, 256)
    a, b = square_operands(probe, dtype)
    a @ b  # the first call pays for thread start-up and kernel selection
    fastest = math.inf
    for _ in range(BEST_OF_ROUNDS):
        started = time.perf_counter()
        a @ b
        fastest = min(fastest, time.perf_counter() - started)
    predicted = fastest * (n / probe) ** 3 * (repeats * BEST_OF_ROUNDS + 1)
    if predicted > budget_s:
        n = max(64, int(n * (budget_s / predicted) ** (1 / 3)) // 64 * 64)
    return best_gflops([square_operands(n, dtype)], repeats, BEST_OF_ROUNDS)


def gemm_peaks(n: int = 1024, repeats: int = 3) -> dict[str, float]:
    """The host's fp32 and bf16 GEMM peaks (GFLOP/s, rounded), the reference a run's speed (MFU) is read against."""
    return {name: round(gemm_peak_gflops(dtype, n, repeats), 1) for name, dtype in PEAK_DTYPES.items()}
