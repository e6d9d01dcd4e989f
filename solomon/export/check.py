"""``solomon verify --export DIR``: an export is what its run, verified now, gives — file by file and tensor by
tensor.

The chain, each link refusing in one line that names the first file or tensor that differs: the export's
``provenance.json`` names a run of this workspace; that run verifies (``solomon.audit.verify``) and its manifest
is the one recorded, and so are its source files; every file of the export has the SHA256 recorded, and no file
is missing or added; every file but the weights is byte for byte what the run renders again (config, tokenizer,
card, GGUF metadata); every tensor, mapped back to Solomon's name and orientation, is the run's bit for bit, and
every bias Solomon's model has not is all zeros. A provenance.json rewritten with fresh hashes therefore still
fails at the tensors or the rendered files. An MLflow export holds the run's own files rather than mapped tensors:
it is checked against the model built again and the manifest's SHA256. The format's own checks are its module's
``verify`` (``solomon.export.FORMATS``); this module holds the chain they share.
"""

from __future__ import annotations

from pathlib import Path

from solomon.errors import SolomonError
from solomon.export import FORMATS, record
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


def verify_export(export_dir: Path, root: Path) -> str:
    """Check ``export_dir`` (an export of any of FORMATS) against its run; the one-line answer, or SolomonError."""
    provenance = record.read(export_dir)
    run_dir = run_dir_of(export_dir, root, provenance["run_id"])
    found = FORMATS[provenance["format"]]
    source = verified_source(run_dir, root, every_subject=found.every_subject)
    _check_record(export_dir, provenance, source)
    checked = found.load().verify(export_dir, provenance, source, root)
    return (
        f"{export_dir}: {provenance['format']} export of run {source.run_id} verified: {len(provenance['files'])} "
        f"file(s) by SHA256, {checked}; manifest sha256 {source.manifest_sha256}"
    )
