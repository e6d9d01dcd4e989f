"""``solomon lineage --export DIR``: from an export on disk back to the corpus, every link checked.

export (``solomon verify --export``: its provenance.json names a run of this workspace, every file and tensor is
that run's) → then the chain a live server's continues with (``solomon.lineage.server.run_links``): manifest, run
id, weights, tokenizer, corpus, params, git commit, requirements lock.
"""

from __future__ import annotations

from pathlib import Path

from solomon.errors import SolomonError
from solomon.export import record
from solomon.export.check import run_dir_of, verify_export
from solomon.lineage.server import Broken, run_links
from solomon.records import WEIGHTS


def export_lineage(export_dir: Path, root: Path) -> list[tuple[str, str]]:
    """The chain as (link, what holds) pairs; raises Broken at the first link that does not hold."""
    try:
        verified = verify_export(export_dir, root)
    except SolomonError as exc:
        raise Broken("export", str(exc)) from None
    provenance = record.read(export_dir)
    run_dir = run_dir_of(export_dir, root, provenance["run_id"])
    ids, weights = {"export": provenance["run_id"]}, ("export", provenance["sources"].get(WEIGHTS))
    return [("export", verified), *run_links(run_dir, provenance["manifest_sha256"], root, ids, weights)]
