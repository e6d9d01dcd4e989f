"""The export formats are one registry (``solomon.export.FORMATS``): a format is its module's ``write`` and
``verify`` side by side, so a fourth one — here a test-only format that holds the run's weights file as it is — is
one module and one entry, and `solomon export`'s path, provenance.json and `solomon verify --export` all take it."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest
from conftest import flip_last_byte, latest_run_dir, one_line_refusal

from solomon.atomic import staged_dir
from solomon.errors import SolomonError
from solomon.export import FORMATS, GGUF, HF, MLFLOW, Format, export, record
from solomon.export.check import verify_export
from solomon.export.source import ExportSource
from solomon.hashing import sha256_file
from solomon.records import WEIGHTS

RAW, RAW_FILE = "raw", "model.safetensors"


def _write(source: ExportSource, root: Path, out: Path) -> Path:
    record.check_out(out, source.run_id)
    with staged_dir(out) as tmp:
        shutil.copyfile(source.files[WEIGHTS], tmp / RAW_FILE)
        record.write(tmp, source, RAW)
    return out


def _verify(export_dir: Path, provenance: dict, source: ExportSource, root: Path) -> str:
    record.check_files(export_dir, provenance, {RAW_FILE})
    if sha256_file(export_dir / RAW_FILE) != source.sha256[WEIGHTS]:
        raise SolomonError(f"{export_dir / RAW_FILE}: not run {source.run_id}'s weights")
    return "the weights file by the manifest's SHA256"


@pytest.fixture
def raw_format(monkeypatch):
    module = types.ModuleType("solomon_test_raw_format")
    module.write, module.verify = _write, _verify
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(FORMATS, RAW, Format("the run's weights file as it is (a test's format)", module.__name__))
    return RAW


def test_each_format_names_a_module_with_its_write_and_its_verify() -> None:
    assert list(FORMATS) == [HF, GGUF, MLFLOW]
    for found in FORMATS.values():
        module = found.load()
        assert callable(module.write) and callable(module.verify), found.module
    assert [name for name, found in FORMATS.items() if found.every_subject] == [MLFLOW]  # it carries the run dir


def test_a_fourth_format_is_one_module_and_one_entry(raw_format, repo_copy, tmp_path: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    out = export(raw_format, run_dir, repo_copy, tmp_path / "raw")
    assert record.read(out)["format"] == RAW
    assert f"{RAW} export of run {run_dir.name} verified" in verify_export(out, repo_copy)
    flip_last_byte(out / RAW_FILE)
    assert "SHA256" in one_line_refusal(verify_export, out, repo_copy)  # provenance.json's own hashes catch it first
