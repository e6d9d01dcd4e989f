"""Run this interpreter on an emulated x86-64 CPU: Debian's qemu-user (``qemu-x86_64 -cpu <model>``) runs one
process on the CPU model's instruction set, so one machine can check what another kind of host computes.

Two AVX2-only models, one of each vendor, as the libraries dispatch by vendor too (MKL): an AMD EPYC-Milan and an
Intel Haswell. An emulator computes the approximate instructions some kernels start from (reciprocal and
square-root estimates) its own way, so agreement with it is agreement with that CPU model, not a proof for every
real part.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping

EMULATORS = {
    "EPYC-Milan": ("qemu-x86_64", "-cpu", "EPYC-Milan"),  # AMD Zen 3: AVX2, no AVX-512
    "Haswell": ("qemu-x86_64", "-cpu", "Haswell"),  # Intel: AVX2, no AVX-512
}
INSTALL = "`make isa-check` and `make portable-check` install Debian's qemu-user first (.ci/install-qemu)"


def require_emulator() -> None:
    if shutil.which("qemu-x86_64") is None:
        raise SystemExit(f"qemu-x86_64 not found: {INSTALL}")


def python_command(emulator: str | None) -> list[str]:
    """This interpreter, natively or under ``emulator`` (a name of ``EMULATORS``). Under an emulator the venv's
    symlinked interpreter is run by its real path (qemu does not resolve it as the kernel would)."""
    if emulator is None:
        return [sys.executable]
    return [*EMULATORS[emulator], os.path.realpath(sys.executable)]


def emulated_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the venv's packages named on PYTHONPATH: run by its real path, the interpreter does not find
    the venv it belongs to."""
    paths = [env.get("PYTHONPATH", ""), sysconfig.get_paths()["purelib"]]
    return dict(env) | {"PYTHONPATH": os.pathsep.join(filter(None, paths))}
