"""The block layouts the bench and the tests compare, by name, as the model.* params that make each one: every
published layout of every family (solomon/families.py) — GPT-2's, Llama's, and Qwen3's (Llama's with
QK-norm). Each sets ``qk_norm`` explicitly, so a name means one layout whichever family is the default."""

from solomon.families import FAMILIES as _BLOCK_FAMILIES

FAMILIES = {
    layout.name: {"family": family, "qk_norm": qk_norm}
    for family, entry in _BLOCK_FAMILIES.items()
    for qk_norm, layout in entry.layouts.items()
}
