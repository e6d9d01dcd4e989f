"""``solomon verify --export DIR``: an export is what its run, verified now, gives — file by file and tensor by
tensor.

The chain, each link refusing in one line that names the first file or tensor that differs: the export's
``provenance.json`` names a run of this workspace; that run verifies (``solomon.audit.verify``) and its manifest
is the one recorded, and so are its source files; every file of the export has the SHA256 recorded, and no file
is missing or added; every file but the weights is byte for byte what the run renders again (config, tokenizer,
card, GGUF metadata); every tensor, mapped back to Solomon's name and orientation, is the run's bit for bit, and
every bias Solomon's model has not is all zeros. A provenance.json rewritten with fresh hashes therefore still
fails at the tensors or the rendered files. An MLflow export holds the run's own files rather than mapped tensors:
``solomon.export.mlflow_model`` checks it against the model built again and the manifest's SHA256.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gguf
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from solomon.errors import SolomonError
from solomon.export import GGUF, HF, MLFLOW, gguf_file, hf, record
from solomon.export.layout import gguf_architecture, mismatch, slots
from solomon.export.source import ExportSource, verified_source
from solomon.params import runs_root
from solomon.records import RunFiles


def run_dir_of(export_dir: Path, root: Path, run_id: str) -> Path:
    """The run directory of this workspace that provenance.json's ``run_id`` names; one line if there is none."""
    where = export_dir / record.PROVENANCE
    runs = root / runs_root(root)
    if run_id in ("", ".", "..") or "/" in run_id or "\\" in run_id:
        raise SolomonError(f"{where}: run id {run_id!r} is not the name of a run directory")
    if not (runs / run_id / RunFiles.MANIFEST).is_file():
        raise SolomonError(f"{where}: names run {run_id}, which is not among the runs in {runs} (`solomon runs`)")
    return runs / run_id


def _check_record(export_dir: Path, provenance: dict, source: ExportSource) -> None:
    where = export_dir / record.PROVENANCE
    if provenance["manifest_sha256"] != source.manifest_sha256:
        raise SolomonError(
            f"{where}: manifest SHA256 {provenance['manifest_sha256'][:12]}… is not run {source.run_id}'s "
            f"{source.manifest_sha256[:12]}… (made from another manifest)"
        )
    for name in sorted(set(source.sha256) | set(provenance["sources"])):
        if provenance["sources"].get(name) != source.sha256.get(name):
            raise SolomonError(f"{where}: source {name} is not the run's (SHA256 differs from its manifest)")


def _check_tensors(
    export_dir: Path, name: str, found: dict[str, torch.Tensor], source: ExportSource, is_hf: bool
) -> int:
    config = source.model.config
    layout = slots(config, gguf_llama=not is_hf and gguf_architecture(config) == "llama")
    names = {slot.hf if is_hf else slot.gguf for slot in layout}
    extra = sorted(set(found) - names)
    if extra:
        raise SolomonError(f"{export_dir / name}: tensor {extra[0]} is not one of the run's model")
    for slot in layout:
        key = slot.hf if is_hf else slot.gguf
        if key not in found:
            raise SolomonError(f"{export_dir / name}: tensor {key} is missing")
        problem = mismatch(slot, found[key], source.state, is_hf)
        if problem:
            raise SolomonError(f"{export_dir / name}: {problem}")
    return len(layout)


def _tensors_line(count: int) -> str:
    return f"{count} tensors bit for bit against the run's weights"


def _verify_hf(export_dir: Path, provenance: dict, source: ExportSource, root: Path) -> str:
    rendered = hf.rendered(source)
    record.check_files(export_dir, provenance, {*rendered, hf.WEIGHTS_FILE})
    for name, content in rendered.items():
        if (export_dir / name).read_bytes() != content:
            raise SolomonError(f"{export_dir / name}: not what run {source.run_id} gives (edited)")
    try:
        tensors = load_file(str(export_dir / hf.WEIGHTS_FILE))
    except SafetensorError as exc:
        raise SolomonError(f"{export_dir / hf.WEIGHTS_FILE}: not a readable safetensors file ({exc})") from None
    return _tensors_line(_check_tensors(export_dir, hf.WEIGHTS_FILE, tensors, source, is_hf=True))


def metadata(path: Path) -> dict:
    """A GGUF file's key-value metadata (the header's own counts aside)."""
    return {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items() if not key.startswith("GGUF.")}


def _verify_gguf(export_dir: Path, provenance: dict, source: ExportSource, root: Path) -> str:
    path = export_dir / gguf_file.GGUF_FILE
    record.check_files(export_dir, provenance, {gguf_file.GGUF_FILE})
    try:
        reader = gguf.GGUFReader(path)
        found = metadata(path)
    except (ValueError, OSError) as exc:
        raise SolomonError(f"{path}: not a readable GGUF file ({exc})") from None
    with tempfile.TemporaryDirectory() as scratch:
        gguf_file.write_file(Path(scratch) / gguf_file.GGUF_FILE, source, tensors=False)
        expected = metadata(Path(scratch) / gguf_file.GGUF_FILE)
    for key in sorted(set(found) | set(expected)):
        if found.get(key) != expected.get(key):
            raise SolomonError(f"{path}: metadata {key} is not what run {source.run_id} gives")
    tensors = {}
    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
            raise SolomonError(f"{path}: tensor {tensor.name} is {tensor.tensor_type.name}, not the run's F32")
        tensors[tensor.name] = torch.from_numpy(tensor.data.copy())
    return _tensors_line(_check_tensors(export_dir, gguf_file.GGUF_FILE, tensors, source, is_hf=False))


def _verify_mlflow(export_dir: Path, provenance: dict, source: ExportSource, root: Path) -> str:
    from solomon.export import mlflow_model  # imports mlflow

    return mlflow_model.verify(export_dir, provenance, source, root)


CHECKS = {HF: _verify_hf, GGUF: _verify_gguf, MLFLOW: _verify_mlflow}


def verify_export(export_dir: Path, root: Path) -> str:
    """Check ``export_dir`` (an export of any of FORMATS) against its run; the one-line answer, or SolomonError."""
    provenance = record.read(export_dir)
    run_dir = run_dir_of(export_dir, root, provenance["run_id"])
    # an MLflow export carries the whole run directory: every subject is verified, as promote does
    source = verified_source(run_dir, root, every_subject=provenance["format"] == MLFLOW)
    _check_record(export_dir, provenance, source)
    checked = CHECKS[provenance["format"]](export_dir, provenance, source, root)
    return (
        f"{export_dir}: {provenance['format']} export of run {source.run_id} verified: {len(provenance['files'])} "
        f"file(s) by SHA256, {checked}; manifest sha256 {source.manifest_sha256}"
    )
