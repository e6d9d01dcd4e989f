"""configure_torch in a fresh interpreter: deterministic kernels on, inductor left unimported unless compiling."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys, torch
from solomon.runtime import configure_torch
configure_torch(1, compiled={compiled})
print(torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory,
      "torch._inductor" in sys.modules, torch.get_num_threads())
if {compiled}:
    import torch._inductor.config as inductor_config
    print(inductor_config.deterministic)
"""


@pytest.mark.parametrize("compiled", [False, True])
def test_deterministic_mode_without_importing_inductor(compiled: bool) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(compiled=compiled)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[:2] == ["True", "False"] and out[3] == "1"
    assert out[2] == str(compiled)  # eager stages start 1 s sooner; a compiled run needs inductor's flag set
    if compiled:
        assert out[4] == "True"
