"""The platform locks: the same pins on each, and the check that downloads a lock for a platform fails for a package
with no wheel there (lab/locks.py; `make lock-check` runs every platform's lock in full)."""

import re
from pathlib import Path

from lab.locks import PLATFORMS, Platform, check

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([a-z0-9._-]+)==([^ ;\\]+)", re.MULTILINE)


def pins(lock: str) -> dict[str, str]:
    return dict(PIN.findall((ROOT / lock).read_text()))


def test_every_platform_lock_pins_the_same_versions_torch_a_cpu_build_on_each() -> None:
    linux = pins("requirements.lock")
    assert linux["torch"] == "2.13.0+cpu"
    for platform in PLATFORMS:
        found = pins(platform.lock)
        assert {k: v for k, v in found.items() if k != "torch"} == {k: v for k, v in linux.items() if k != "torch"}
        assert found["torch"].split("+")[0] == "2.13.0"
        assert "nvidia" not in " ".join(found) and "triton" not in found, platform.name  # no CUDA build pulled in


def test_a_lock_whose_package_has_no_wheel_for_the_platform_fails_the_check(tmp_path: Path) -> None:
    torch_entry = re.search(r"^torch==.*?(?=^\S)", (ROOT / "requirements.lock").read_text(), re.MULTILINE | re.DOTALL)
    lock = tmp_path / "torch-only.lock"
    lock.write_text(torch_entry.group(0))
    ok, line = check(Platform("macOS arm64", str(lock), ("macosx_14_0_arm64",)))
    assert not ok and "torch==2.13.0+cpu" in line, line
