"""``solomon export --format gguf``: one GGUF file for llama.cpp (fp32), written with its own ``gguf`` writer, with a
``provenance.json`` beside it. The architecture is the family's layout's name: ``gpt2``, ``llama``, or ``qwen3``.

Tensor names are those llama.cpp's ``convert_hf_to_gguf.py`` gives each (``solomon.export.layout``); its gpt2
loader requires every bias, so a bias-free model's are zeros; every loader takes the output projection from the
token embedding when ``output.weight`` is absent, as here (tied). The tokenizer is GPT-2's kind (byte-level BPE, the
GPT-2 pre-tokenizer regex): the run's vocabulary, merges and end-of-document token as BOS and EOS.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import gguf
import torch

from solomon import records
from solomon.atomic import staged_dir, write_with
from solomon.errors import SolomonError
from solomon.export import GGUF, export, record
from solomon.export.layout import check_tensors, exported, layout, slots
from solomon.export.source import ExportSource
from solomon.model.gpt import RMS_EPS, ROPE_BASE

GGUF_FILE = "model.gguf"
RUN_ID_KEY = "solomon.run_id"
MANIFEST_KEY = "solomon.manifest_sha256"
WEIGHTS_KEY = "solomon.weights_sha256"


def vocabulary(source: ExportSource) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, their GGUF token types, merges as "left right"), from the run's tokenizer.json."""
    model = json.loads(source.files[records.TOKENIZER].read_text(encoding="utf-8"))["model"]
    by_id = {index: token for token, index in source.tokenizer.get_vocab(with_added_tokens=True).items()}
    special = {t.content for t in source.tokenizer.get_added_tokens_decoder().values() if t.special}
    tokens, types = [], []
    for index in range(source.model.config.vocab_size):  # ids the model has beyond the tokenizer's are unused
        token = by_id.get(index, f"[PAD{index}]")
        tokens.append(token)
        kind = gguf.TokenType.CONTROL if token in special else gguf.TokenType.NORMAL
        types.append(kind if index in by_id else gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, [int(t) for t in types], merges


def add_metadata(writer: gguf.GGUFWriter, source: ExportSource) -> None:
    config = source.model.config
    writer.add_name(f"solomon-{source.run_id}")
    writer.add_context_length(config.block_size)
    writer.add_embedding_length(config.n_embd)
    writer.add_feed_forward_length(config.mlp_hidden)
    writer.add_block_count(config.n_layer)
    writer.add_head_count(config.n_head)
    if config.spec.rms_norm:  # Llama's and Qwen3's keys (GPT-2's layout has LayerNorm and learned positions)
        writer.add_head_count_kv(config.n_head)
        writer.add_layer_norm_rms_eps(RMS_EPS)
        writer.add_rope_dimension_count(config.n_embd // config.n_head)
        writer.add_rope_freq_base(ROPE_BASE)
    else:
        writer.add_layer_norm_eps(source.model.ln_f.eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, types, merges = vocabulary(source)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(source.eod_id)
    writer.add_eos_token_id(source.eod_id)
    writer.add_add_bos_token(False)
    writer.add_string(RUN_ID_KEY, source.run_id)
    writer.add_string(MANIFEST_KEY, source.manifest_sha256)
    writer.add_string(WEIGHTS_KEY, source.sha256[records.WEIGHTS])


def write_file(path: Path, source: ExportSource, tensors: bool = True) -> None:
    """The GGUF file of ``source``; without ``tensors``, its metadata alone (what ``verify --export`` compares)."""
    config = source.model.config
    written = layout(config)
    writer = gguf.GGUFWriter(path, arch=written.name)
    add_metadata(writer, source)
    if tensors:
        state = source.state
        for slot in slots(config, gguf_llama=written.interleaved_rope):
            writer.add_tensor(slot.gguf, exported(slot, state, hf=False).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write(source: ExportSource, root: Path, out: Path) -> Path:
    """Write ``out/model.gguf`` and its provenance.json (staged); returns the GGUF file's path."""
    record.check_out(out, source.run_id)
    with staged_dir(out) as tmp:
        write_with(tmp / GGUF_FILE, lambda path: write_file(path, source))
        record.write(tmp, source, GGUF)
    return out / GGUF_FILE


def metadata(path: Path) -> dict:
    """A GGUF file's key-value metadata (the header's own counts aside)."""
    return {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items() if not key.startswith("GGUF.")}


def verify(export_dir: Path, provenance: dict, source: ExportSource, root: Path) -> str:
    """The metadata key for key what the run gives again, every tensor F32 and the run's."""
    path = export_dir / GGUF_FILE
    record.check_files(export_dir, provenance, {GGUF_FILE})
    try:
        reader = gguf.GGUFReader(path)
        found = metadata(path)
    except (ValueError, OSError) as exc:
        raise SolomonError(f"{path}: not a readable GGUF file ({exc})") from None
    with tempfile.TemporaryDirectory() as scratch:
        write_file(Path(scratch) / GGUF_FILE, source, tensors=False)
        expected = metadata(Path(scratch) / GGUF_FILE)
    for key in sorted(set(found) | set(expected)):
        if found.get(key) != expected.get(key):
            raise SolomonError(f"{path}: metadata {key} is not what run {source.run_id} gives")
    tensors = {}
    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
            raise SolomonError(f"{path}: tensor {tensor.name} is {tensor.tensor_type.name}, not the run's F32")
        tensors[tensor.name] = torch.from_numpy(tensor.data.copy())
    return check_tensors(path, tensors, source.model.config, source.state, hf=False)


def export_gguf(run_dir: Path, root: Path, out: Path) -> Path:
    """Verify ``run_dir``, then write ``out/model.gguf`` and its provenance.json; returns the GGUF file's path."""
    return export(GGUF, run_dir, root, out)
