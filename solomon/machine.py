"""The machine kind: what selects the numerics of a CPU run, as one dict and a short ``kind`` string.

torch and its libraries pick their kernels at run time from the CPU's instruction sets: ATen's vectorised ops by
the capability torch reports (``DEFAULT``, ``AVX2``, ``AVX512``; capped by ``ATEN_CPU_CAPABILITY``), oneDNN's bf16
matmuls by AMX, AVX-512 BF16, AVX-512 or AVX2 (capped by ``ONEDNN_MAX_CPU_ISA``), MKL's fp32 GEMMs likewise. Two
machines of the same kind run the same kernels, so a run is bit-identical on both (threads being equal: a param,
``train.threads``); on another kind the float sums are ordered differently and the last bits differ. The kind names
what decides that — architecture, torch's capability, the best bf16-relevant ISA, AMX or not, the oneDNN version —
and not the CPU model, which the dict keeps for the record.
"""

from __future__ import annotations

import os
import platform
import re
from functools import cache
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")
# The flags (Linux /proc/cpuinfo names) that choose bf16/fp32 kernels on x86, best first.
ISA_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "avx2", "fma")
BEST_OF = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")  # the one the kind names
# Variables that cap the kernels torch and oneDNN choose (a machine can be made to run as a lesser kind).
CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def _cpuinfo() -> tuple[str, set[str]]:
    """(CPU model name, instruction-set flags) from /proc/cpuinfo; the platform's words where there is none."""
    model, flags = "", set()
    try:
        for line in CPUINFO.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and not model:
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


@cache
def _library_versions() -> dict[str, str | None]:
    """oneDNN's and MKL's versions as torch's build configuration states them (None when not built in)."""
    config = torch.__config__.show()
    onednn = re.search(r"(?:oneDNN|MKL-DNN) v?([0-9][0-9.]*)", config)
    mkl = re.search(r"Math Kernel Library Version ([0-9][0-9.]*)", config)
    return {"onednn": onednn.group(1) if onednn else None, "mkl": mkl.group(1) if mkl else None}


def cpu_model() -> str:
    return _cpuinfo()[0]


def describe() -> dict:
    """This process's machine: what selects its kernels, and its ``kind``. Threads are not in it: they are a param
    (``train.threads``, ``eval.threads``) and recorded as one."""
    model, flags = _cpuinfo()
    caps = {name: os.environ[name] for name in CAPS if name in os.environ}
    machine = {
        "arch": platform.machine(),
        "cpu": model,
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
        **_library_versions(),
        "torch": str(torch.__version__),
        "caps": caps,
    }
    return {**machine, "kind": kind(machine)}


def kind(machine: dict) -> str:
    """E.g. ``x86_64 avx512_bf16 (no AMX), torch AVX512, oneDNN 3.12.0``."""
    isa = set(machine.get("isa", []))
    best = next((flag for flag in BEST_OF if flag in isa), "no AVX2")
    amx = "" if best == "amx_bf16" or machine.get("arch") not in ("x86_64", "AMD64") else " (no AMX)"
    caps = machine.get("caps") or {}
    capped = "".join(f", {name}={value}" for name, value in sorted(caps.items()) if name != "ATEN_CPU_CAPABILITY")
    onednn = f", oneDNN {machine['onednn']}" if machine.get("onednn") else ""
    return f"{machine.get('arch')} {best}{amx}, torch {machine.get('torch_capability')}{onednn}{capped}"
