"""The portable mode (``train.portable``): every setting that decides a kernel's bits pinned to the AVX2 path that
every x86-64 host with AVX2 runs, so a run gives the same bytes on any such machine (docs/portable.md).

torch picks its kernels by the instruction set it finds (AVX-512 or AVX2), MKL and oneDNN by their own dispatch and
the CPU's cache sizes; each reads its setting from the environment once, when it loads. So a portable process
whose environment lacks the pins replaces itself (``os.execve``) with the same command in the pinned environment
before it computes anything. A default process runs as its environment lets the libraries choose (a variable capping
them is recorded in the machine kind, ``solomon.machine``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from solomon.errors import SolomonError

# What pins the kernels' instruction set: ATen's capability, MKL's conditional numerical reproducibility branch
# (fixed code path and blocking whatever the CPU's vendor or caches), oneDNN's instruction-set cap.
PINNED_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# Set by the re-executed process: a second mismatch there means the environment cannot be set (no loop).
REEXEC_MARK = "SOLOMON_PORTABLE_REEXEC"


class PortableUnavailable(SolomonError):
    """The host cannot run the pinned path (no AVX2), or the pins did not take."""


def environment_for(portable: bool, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the pins set (portable) or removed (this host's own kernels)."""
    out = {k: v for k, v in env.items() if k not in PINNED_ENV and k != REEXEC_MARK}
    return out | PINNED_ENV if portable else out


def pinned(env: Mapping[str, str]) -> bool:
    """Whether ``env`` holds every pin."""
    return all(env.get(k) == v for k, v in PINNED_ENV.items())


def enter_mode(portable: bool) -> None:
    """Make a portable process run pinned: nothing when its environment holds the pins (or the run is not
    portable), else replace it with the same command line (``sys.orig_argv``) in the pinned environment. Call it
    before any kernel runs."""
    if not portable:
        return
    if pinned(os.environ):
        os.environ.pop(REEXEC_MARK, None)
        check_pinned()
        return
    if os.environ.get(REEXEC_MARK):
        raise PortableUnavailable("train.portable: the pinned environment did not take (its variables were reset)")
    env = environment_for(True, os.environ) | {REEXEC_MARK: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def require_pinned() -> None:
    """Refuse to go on unless this process runs pinned: its environment is the portable one (``enter_mode`` makes
    it so) and torch runs the AVX2 path under it."""
    if not pinned(os.environ):
        raise PortableUnavailable(
            "train.portable: this process's kernels are not pinned (its entry point calls "
            "solomon.portable.enter_mode before torch computes)"
        )
    check_pinned()


def check_pinned() -> None:
    """Refuse a host where torch does not run the AVX2 path under the pins (a CPU without AVX2 and FMA)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if capability != "AVX2":
        raise PortableUnavailable(
            f"train.portable: torch runs its {capability} kernels here, not AVX2 (a CPU without AVX2 and FMA "
            "cannot run the portable path): train with train.portable: false on this host"
        )
