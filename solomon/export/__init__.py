"""Exports of a verified run (Hugging Face, GGUF) that carry its manifest digest and map back to its weights."""
