"""The block layouts the bench and the tests compare, by name, as the model.* params that make each one: GPT-2's,
Llama's, and Qwen3's (Llama's with QK-norm). Each sets ``qk_norm`` explicitly, so a name means one layout whichever
family is the default."""

FAMILIES = {
    "gpt2": {"family": "gpt2", "qk_norm": False},
    "llama": {"family": "llama", "qk_norm": False},
    "qwen3": {"family": "llama", "qk_norm": True},
}
