"""``solomon export --format hf``: a directory ``transformers`` loads with ``AutoTokenizer`` and as ``GPT2LMHeadModel``
(family gpt2), ``LlamaForCausalLM`` (family llama) or ``Qwen3ForCausalLM`` (family llama with QK-norm).

Every file but the weights is rendered from the verified run alone (no clock, no host), so ``verify --export``
renders them again and compares bytes; the weights it maps back to the run's tensors (``solomon.export.layout``).
The tokenizer is the run's ``tokenizer.json`` byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from solomon import records
from solomon.atomic import canonical_json, staged_dir, write_bytes, write_with
from solomon.errors import SolomonError
from solomon.export import HF, card, export, record
from solomon.export.layout import check_tensors, exported, layout, slots
from solomon.export.source import ExportSource
from solomon.families import GPT2, QWEN3, Layout
from solomon.model.gpt import RMS_EPS, ROPE_BASE

WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"


def config(source: ExportSource) -> dict:
    """The Hugging Face config of the run's model, and where it came from."""
    written = layout(source.model.config)
    return gpt2_config(source) if written == GPT2 else llama_config(source, written)


def llama_config(source: ExportSource, written: Layout) -> dict:
    """LlamaConfig's fields (Qwen3Config's with QK-norm, whose q_norm and k_norm have a gain per head channel)."""
    config = source.model.config
    qwen3 = written == QWEN3
    fields = {
        "architectures": [written.hf_class],
        "model_type": written.name,
        "vocab_size": config.vocab_size,
        "hidden_size": config.n_embd,
        "intermediate_size": config.mlp_hidden,
        "num_hidden_layers": config.n_layer,
        "num_attention_heads": config.n_head,
        "num_key_value_heads": config.n_head,
        "head_dim": config.n_embd // config.n_head,
        "hidden_act": "silu",
        "max_position_embeddings": config.block_size,
        "rms_norm_eps": RMS_EPS,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_BASE},
        "attention_bias": False,
        "attention_dropout": 0.0,
    }
    return fields | shared_config(source) | ({"use_sliding_window": False} if qwen3 else {"mlp_bias": False})


def gpt2_config(source: ExportSource) -> dict:
    """GPT2Config's fields."""
    model = source.model
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": model.config.vocab_size,
        "n_positions": model.config.block_size,
        "n_embd": model.config.n_embd,
        "n_layer": model.config.n_layer,
        "n_head": model.config.n_head,
        "n_inner": model.blocks[0].mlp.fc.out_features,
        "activation_function": "gelu",  # transformers' ACT2FN["gelu"]: the exact erf GELU, as F.gelu's default
        "layer_norm_epsilon": model.ln_f.eps,
        # Solomon drops embeddings and residuals, never attention probabilities (solomon/model/gpt.py).
        "embd_pdrop": model.config.dropout,
        "resid_pdrop": model.config.dropout,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
    } | shared_config(source)


def shared_config(source: ExportSource) -> dict:
    """The fields every family's config has alike: tied embeddings, the end-of-document token as BOS and EOS, fp32,
    and where the model came from."""
    eod = source.eod_id
    return {
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
        "bos_token_id": eod,
        "eos_token_id": eod,
        "dtype": "float32",
        "use_cache": True,
        "solomon": provenance_keys(source),
    }


def provenance_keys(source: ExportSource) -> dict:
    return {
        "run_id": source.run_id,
        "manifest_sha256": source.manifest_sha256,
        "weights_sha256": source.sha256[records.WEIGHTS],
    }


def tokenizer_config(source: ExportSource) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": source.eod_token,
        "eos_token": source.eod_token,
        "model_max_length": source.model.config.block_size,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }


def generation_config(source: ExportSource) -> dict:
    """The run's own sampling settings (train.samples); top_k null (none) is transformers' 0."""
    samples = source.hyperparameters["train"]["samples"]
    return {
        "do_sample": True,
        "temperature": samples["temperature"],
        "top_k": samples["top_k"] or 0,
        "max_new_tokens": samples["max_new_tokens"],
        "bos_token_id": source.eod_id,
        "eos_token_id": source.eod_id,
        "pad_token_id": source.eod_id,
    }


def rendered(source: ExportSource) -> dict[str, bytes]:
    """Every file of the export but the weights, by name."""
    fields = config(source)
    text = {
        "config.json": canonical_json(fields),
        "tokenizer_config.json": canonical_json(tokenizer_config(source)),
        "generation_config.json": canonical_json(generation_config(source)),
        "README.md": card.render(source, fields),
    }
    return {TOKENIZER_FILE: source.files[records.TOKENIZER].read_bytes()} | {
        name: content.encode("utf-8") for name, content in text.items()
    }


def write(source: ExportSource, root: Path, out: Path) -> Path:
    """Write the export of a verified ``source`` to ``out`` (staged: ``out`` changes only when all is written)."""
    record.check_out(out, source.run_id)
    state = source.state
    tensors = {slot.hf: exported(slot, state, hf=True) for slot in slots(source.model.config)}
    with staged_dir(out) as tmp:
        tensors = dict(sorted(tensors.items()))
        write_with(tmp / WEIGHTS_FILE, lambda path: save_file(tensors, str(path), metadata={"format": "pt"}))
        for name, content in rendered(source).items():
            write_bytes(tmp / name, content)
        record.write(tmp, source, HF)
    return out


def verify(export_dir: Path, provenance: dict, source: ExportSource, root: Path) -> str:
    """Every file but the weights byte for byte what the run renders again, every tensor the run's."""
    files = rendered(source)
    record.check_files(export_dir, provenance, {*files, WEIGHTS_FILE})
    for name, content in files.items():
        if (export_dir / name).read_bytes() != content:
            raise SolomonError(f"{export_dir / name}: not what run {source.run_id} gives (edited)")
    try:
        tensors = load_file(str(export_dir / WEIGHTS_FILE))
    except SafetensorError as exc:
        raise SolomonError(f"{export_dir / WEIGHTS_FILE}: not a readable safetensors file ({exc})") from None
    return check_tensors(export_dir / WEIGHTS_FILE, tensors, source.model.config, source.state, hf=True)


def export_hf(run_dir: Path, root: Path, out: Path) -> Path:
    """Verify ``run_dir``, then write its Hugging Face export to ``out``; returns ``out``."""
    return export(HF, run_dir, root, out)
