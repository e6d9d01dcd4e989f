"""`make lock-check`: each platform's lock downloaded for that platform, every hash checked.

pip downloads a lock's files as an installer on the platform would choose them (``--platform``, ``--python-version``,
``--abi``), with ``--require-hashes``. A package that comes as a source distribution is then looked up on PyPI: one
that has wheels for that version but none for this platform fails the check (it would need a compiler there); one
that has no wheel at all is built from source on every platform alike, so on this one by ``make setup`` too, and is
named. Prints one line per platform and exits non-zero when one fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"


@dataclass(frozen=True)
class Platform:
    name: str
    lock: str
    tags: tuple[str, ...]  # pip's --platform values, best first


PLATFORMS = (
    Platform(
        "Linux x86-64", "requirements.lock", ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
    ),
    Platform("macOS arm64", "requirements-macos-arm64.lock", ("macosx_14_0_arm64",)),
)
SOURCE_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2")


def download(platform: Platform, into: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--python-version", PYTHON_VERSION, "--implementation", "cp",
        "--abi", f"cp{PYTHON_VERSION.replace('.', '')}", "--abi", "abi3", "--abi", "none",
        *[arg for tag in (*platform.tags, "any") for arg in ("--platform", tag)],
        "-r", str(ROOT / platform.lock), "-d", str(into),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, check=False)


def source_only(file: Path) -> tuple[str, str]:
    """(name, version) of a source distribution's file name."""
    stem = file.name
    for suffix in SOURCE_SUFFIXES:
        stem = stem.removesuffix(suffix)
    name, _, version = stem.rpartition("-")
    return name, version


def has_wheels(name: str, version: str) -> bool:
    """Whether PyPI holds any wheel of this release (a release only this machine's index holds has none there)."""
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/{version}/json", timeout=60) as response:
            release = json.load(response)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return any(file["packagetype"] == "bdist_wheel" for file in release["urls"])


def check(platform: Platform) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="solomon-locks-") as scratch:
        done = download(platform, Path(scratch))
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
            return False, f"{platform.name} ({platform.lock}): {' '.join(errors[:2]) or done.stderr[-500:]}"
        files = sorted(Path(scratch).iterdir())
        sources = [source_only(file) for file in files if file.name.endswith(SOURCE_SUFFIXES)]
        missing = [f"{name} {version}" for name, version in sources if has_wheels(name, version)]
        if missing:
            return False, f"{platform.name} ({platform.lock}): wheels exist but none for it: {', '.join(missing)}"
        built = f"; built from source everywhere: {', '.join(f'{n} {v}' for n, v in sources)}" if sources else ""
        return True, f"{platform.name} ({platform.lock}): {len(files)} files, every hash checked{built}"


def main() -> None:
    failed = False
    for platform in PLATFORMS:
        ok, line = check(platform)
        print(f"{'ok' if ok else 'FAIL'}  {line}", flush=True)
        failed |= not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
