"""Exports of a verified run (Hugging Face, GGUF, MLflow) that carry its manifest digest and map back to its
weights."""

HF, GGUF, MLFLOW = "hf", "gguf", "mlflow"
# The export formats and what each one is: the one list `solomon export --format`, provenance.json and
# `solomon verify --export` know.
FORMATS = {
    HF: "a directory transformers loads with AutoTokenizer and as the family's class (GPT2LMHeadModel, "
    "LlamaForCausalLM, Qwen3ForCausalLM with QK-norm), with a model card",
    GGUF: "model.gguf for llama.cpp (architecture gpt2, llama or qwen3 by the family; fp32)",
    MLFLOW: "an MLflow python_function model directory (`mlflow models serve -m DIR`, `mlflow.pyfunc.load_model`), "
    "the very model `solomon promote` registers",
}
