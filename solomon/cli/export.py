"""`solomon export`: a verified run's model in the formats other tools serve (Hugging Face transformers, GGUF for
llama.cpp), each carrying its provenance; `solomon verify --export DIR` proves one back to its run."""

from __future__ import annotations

import argparse
from pathlib import Path

from solomon.cli.arguments import add_run_arguments, run_of

FORMATS = ("hf", "gguf")


def register(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export",
        help="write a verified run's model as a Hugging Face (hf) or GGUF (gguf) export with its provenance",
        description="Verify the run, then write its model from the verified files only into --out (staged, renamed "
        "at the end: a refusal writes nothing). hf: a directory transformers loads as GPT2LMHeadModel with "
        "AutoTokenizer; gguf: model.gguf for llama.cpp. Each carries provenance.json (run id, manifest SHA256, the "
        "SHA256 of every file it was made from and of every file it holds); `solomon verify --export DIR` checks it.",
    )
    add_run_arguments(export)
    export.add_argument("--format", required=True, choices=FORMATS, help="hf (transformers) or gguf (llama.cpp)")
    export.add_argument(
        "--out", required=True, help="the export's directory: new, empty, or an earlier export of the same run"
    )
    export.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> None:
    run_dir, root, out = run_of(args), Path(args.root), Path(args.out)
    if args.format == "hf":
        from solomon.export.hf import export_hf

        written = export_hf(run_dir, root, out)
    else:
        from solomon.export.gguf_file import export_gguf

        written = export_gguf(run_dir, root, out)
    print(f"export: {args.format} export of {run_dir.name} in {written}; check it with `solomon verify --export {out}`")
