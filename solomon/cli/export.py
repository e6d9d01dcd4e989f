"""`solomon export`: a verified run's model in the formats other tools serve (Hugging Face transformers, GGUF for
llama.cpp, an MLflow pyfunc model), each carrying its provenance; `solomon verify --export DIR` proves one back to
its run."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from solomon.cli.arguments import add_run_arguments, run_of
from solomon.errors import SolomonError
from solomon.export import FORMATS, export


def register(commands: argparse._SubParsersAction) -> None:
    kinds = "; ".join(f"{name}: {found.description}" for name, found in FORMATS.items())
    parser = commands.add_parser(
        "export",
        help=f"write a verified run's model as an export ({', '.join(FORMATS)}) with its provenance",
        description="Verify the run, then write its model from the verified files only into --out (staged, renamed "
        f"at the end: a refusal writes nothing). {kinds}. Each carries provenance.json (run id, manifest SHA256, the "
        "SHA256 of every file it was made from and of every file it holds); `solomon verify --export DIR` checks it "
        "and `solomon lineage --export DIR` walks from it back to the corpus.",
    )
    add_run_arguments(parser)
    parser.add_argument("--format", required=True, choices=list(FORMATS), help=kinds)
    parser.add_argument(
        "--out", required=True, help="the export's directory: new, empty, or an earlier export of the same run"
    )
    parser.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> None:
    run_dir, root, out = run_of(args), Path(args.root), Path(args.out)
    try:
        written = export(args.format, run_dir, root, out)
    except (OSError, shutil.Error) as exc:  # the destination: unwritable, not a directory, full (staged: none left)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else " ".join(str(exc).split())[:160]
        raise SolomonError(f"could not write the export in {out} ({reason}): give a writable --out with room") from None
    except Exception as exc:  # a library's own error for a full disk (safetensors raises SafetensorError)
        if "No space left on device" not in str(exc):
            raise
        raise SolomonError(f"could not write the export in {out} (no space left on device): free space") from None
    print(f"export: {args.format} export of {run_dir.name} in {written}; check it with `solomon verify --export {out}`")
