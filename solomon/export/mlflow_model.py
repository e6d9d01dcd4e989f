"""``solomon export --format mlflow``: the MLflow ``python_function`` model ``solomon promote`` registers, as a
directory that ``mlflow models serve -m DIR`` and ``mlflow.pyfunc.load_model(DIR)`` load, with ``provenance.json``
beside its ``MLmodel``.

One builder writes it for both (``solomon.tracking.run_model.build``): the loader module ``solomon.export.pyfunc``
and, as its data, a serving root (the run directory, the weights, the model config and the tokenizer). ``MLmodel``
holds a creation time and a uuid, so ``verify --export`` builds the model again from the verified run and
compares ``MLmodel`` field by field, every other file byte for byte; before that, the serving root's weights,
model config and tokenizer must have the manifest's SHA256 and its run directory the run's manifest.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from solomon.atomic import staged_dir
from solomon.audit.manifest import digest_of
from solomon.errors import SolomonError
from solomon.export import MLFLOW, export, record
from solomon.export.source import ExportSource
from solomon.records import SERVING_FILES, WEIGHTS, RunFiles
from solomon.tracking import run_model

MLMODEL = "MLmodel"
UNIQUE = ("utc_time_created", "model_uuid")  # MLmodel's fields that differ from one writing to the next


def build(source: ExportSource, root: Path, into: Path) -> Path:
    """The run's MLflow model at ``into`` (new or empty), as promote builds it."""
    return run_model.build(into, source.run_dir, root, source.files, source.manifest_sha256, source.sha256[WEIGHTS])


def write(source: ExportSource, root: Path, out: Path) -> Path:
    """Write the run's MLflow model and provenance.json to ``out`` (staged); returns ``out``."""
    record.check_out(out, source.run_id)
    with staged_dir(out) as tmp:
        build(source, root, tmp)
        record.write(tmp, source, MLFLOW)
    return out


def export_mlflow(run_dir: Path, root: Path, out: Path) -> Path:
    """Verify ``run_dir`` (every subject: the model carries the whole run directory), then write its MLflow model
    and provenance.json to ``out``; returns ``out``."""
    return export(MLFLOW, run_dir, root, out)


def _fields(value: object, prefix: str = "") -> dict[str, object]:
    """A parsed MLmodel as dotted field names and their values (``flavors.python_function.loader_module``)."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, object] = {}
    for key, inner in value.items():
        flat |= _fields(inner, f"{prefix}.{key}" if prefix else str(key))
    return flat


def _mlmodel(path: Path) -> dict[str, object]:
    try:
        parsed = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SolomonError(f"{path}: not a readable MLmodel ({str(exc).splitlines()[0]})") from None
    if not isinstance(parsed, dict):
        raise SolomonError(f"{path}: not a readable MLmodel (not a mapping)")
    return {key: value for key, value in _fields(parsed).items() if key not in UNIQUE}


def _check_mlmodel(export_dir: Path, expected: Path, source: ExportSource) -> None:
    found, wanted = _mlmodel(export_dir / MLMODEL), _mlmodel(expected / MLMODEL)
    for key in sorted(set(found) | set(wanted)):
        if found.get(key) != wanted.get(key):
            raise SolomonError(
                f"{export_dir / MLMODEL}: field {key} is {str(found.get(key))[:80]!r}, run {source.run_id} gives "
                f"{str(wanted.get(key))[:80]!r}"
            )


def _check_serving_root(export_dir: Path, found: dict[str, str], source: ExportSource, root: Path) -> None:
    """The weights, model config and tokenizer inside are the manifest's (``found``: the export's SHA256 by
    relative path, as ``record.check_files`` hashed them), and so is the run directory's manifest."""
    served = run_model.served_root(export_dir)
    for name in SERVING_FILES:
        sha256 = found[(served / name).relative_to(export_dir).as_posix()]
        if sha256 != source.sha256[name]:
            raise SolomonError(
                f"{served / name}: SHA256 {sha256[:12]}… is not the manifest's {name} ({source.sha256[name][:12]}…)"
            )
    manifest = served / run_model.run_path(root, source.run_id) / RunFiles.MANIFEST
    if digest_of(manifest.read_bytes()) != source.manifest_sha256:
        raise SolomonError(f"{manifest}: not run {source.run_id}'s manifest ({source.manifest_sha256[:12]}…)")


def verify(export_dir: Path, provenance: dict, source: ExportSource, root: Path) -> str:
    """Check an MLflow export against its run, built again; what was checked, or SolomonError."""
    with tempfile.TemporaryDirectory() as scratch:
        expected = build(source, root, Path(scratch) / "model")
        wanted = record.exported_files(expected)
        found = record.check_files(export_dir, provenance, set(wanted))
        _check_mlmodel(export_dir, expected, source)
        _check_serving_root(export_dir, found, source, root)
        for name in sorted(set(wanted) - {MLMODEL}):
            if found[name] != wanted[name]:
                raise SolomonError(f"{export_dir / name}: not what run {source.run_id} gives (edited)")
    return (
        f"{MLMODEL} field by field, the serving root's weights, model config and tokenizer by the manifest's SHA256 "
        f"(weights sha256 {source.sha256[WEIGHTS]})"
    )
