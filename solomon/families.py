"""The block families, one entry each: what a null option means in it, which options it fixes, how its blocks
normalise, and the published layouts it exports as. The params (defaults, validation), the model (its norms, the
QK-norm's gain) and the exports (Hugging Face class and model type, GGUF architecture, the model card) all read
this table, so a new family is one entry here and its tests (and, for it to export, its layout's slots).

No torch here: params.py reads it before anything is built."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Layout:
    """A published architecture that a family's model is written as, exactly."""

    name: str  # Hugging Face's model_type and llama.cpp's GGUF architecture
    hf_class: str  # the transformers class that loads the export
    title: str  # what the model card calls the architecture
    # llama.cpp's GGUF `llama` rotates adjacent channel pairs where Solomon pairs i with i + head_dim/2: the query
    # and key rows are permuted as its converter does
    interleaved_rope: bool = False


@dataclass(frozen=True)
class Family:
    defaults: dict[str, object]  # what a null model.position / qk_norm / activation means in this family
    fixed: dict[str, object] = field(default_factory=dict)  # options that have one value only in this family
    biases: bool = True  # model.bias may be on
    rms_norm: bool = False  # RMSNorm with a gain on the residual stream (else LayerNorm)
    qk_gain: bool = False  # its QK-norm has a learned gain per channel of a head (Qwen3's q_norm, k_norm)
    layouts: dict[bool, Layout] = field(default_factory=dict)  # by model.qk_norm: the layout it exports as


GPT2 = Layout("gpt2", "GPT2LMHeadModel", "GPT-2")
LLAMA = Layout("llama", "LlamaForCausalLM", "Llama", interleaved_rope=True)
QWEN3 = Layout("qwen3", "Qwen3ForCausalLM", "Qwen3")

# gpt2: LayerNorm, learned positions, an exact-GELU MLP (GPT-2's layout; its options on, no layout carries it).
# llama: RMSNorm with a gain, rotary positions, a SwiGLU MLP, no biases (Llama's layout; Qwen3's with QK-norm).
FAMILIES = {
    "gpt2": Family(defaults={"position": "learned", "qk_norm": False, "activation": "gelu"}, layouts={False: GPT2}),
    "llama": Family(
        defaults={"position": "rotary", "qk_norm": True, "activation": "swiglu"},
        fixed={"position": "rotary", "activation": "swiglu"},
        biases=False,
        rms_norm=True,
        qk_gain=True,
        layouts={False: LLAMA, True: QWEN3},
    ),
}
LAYOUTS = {layout.name: layout for family in FAMILIES.values() for layout in family.layouts.values()}


def layout_of(family: str, qk_norm: bool) -> Layout | None:
    """The layout a model of ``family`` exports as (None: none carries it)."""
    return FAMILIES[family].layouts.get(qk_norm)
