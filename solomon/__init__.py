"""Solomon: a reproducible, resumable and auditable training pipeline for small language models on CPU."""

__version__ = "0.1.0"
