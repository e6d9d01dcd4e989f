"""The model card (``README.md``) of a Hugging Face export: the Hub's YAML front matter (license from the run's
data card, held-out metrics as a model-index) and the provenance a reader checks with ``solomon verify --export``."""

from __future__ import annotations

import yaml

from solomon import records
from solomon.export.source import ExportSource
from solomon.families import LAYOUTS, QWEN3
from solomon.records import RunFiles

METRICS = (("loss", "Loss"), ("perplexity", "Perplexity"), ("bits_per_byte", "Bits per byte"), ("accuracy", "Accuracy"))


def front_matter(source: ExportSource, model_type: str) -> dict:
    data = source.record(RunFiles.DATACARD_JSON)["front_matter"]
    metrics = source.record(RunFiles.METRICS)
    corpus = source.hyperparameters["corpus"]["source"]
    matter = {"license": data.get("license") or "unknown"}
    if data.get("license_name"):
        matter["license_name"] = data["license_name"]
    return matter | {
        "language": data.get("language", []),
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["solomon", model_type, "text-generation"],
        "model-index": [
            {
                "name": f"solomon-{source.run_id}",
                "results": [
                    {
                        "task": {"type": "text-generation", "name": "Language modelling"},
                        "dataset": {"name": data.get("pretty_name", corpus), "type": corpus, "split": split},
                        "metrics": [
                            {"type": key, "name": name, "value": metrics[split][key]}
                            for key, name in METRICS
                            if key in metrics.get(split, {})
                        ],
                    }
                    for split in records.SPLITS
                ],
            }
        ],
    }


def architecture(config: dict) -> str:
    """One sentence on the model's layout, for the config's ``model_type``."""
    if config["model_type"] == "gpt2":
        return (
            f"A GPT-2-architecture language model ({config['n_layer']} layers, {config['n_head']} heads, "
            f"{config['n_embd']} wide, {config['n_positions']} positions, {config['vocab_size']} tokens, no biases: "
            "GPT-2's are zeros here)"
        )
    written = LAYOUTS[config["model_type"]]
    return (
        f"A {written.title}-architecture language model ({config['num_hidden_layers']} layers, "
        f"{config['num_attention_heads']} heads, {config['hidden_size']} wide, {config['max_position_embeddings']} "
        f"positions, {config['vocab_size']} tokens: RMSNorm, SwiGLU, rotary positions"
        + (", QK-norm" if written == QWEN3 else "")
        + ", tied embeddings, no biases)"
    )


def render(source: ExportSource, config: dict) -> str:
    """The card of the export whose Hugging Face ``config`` (config.json's fields) is given."""
    matter = front_matter(source, config["model_type"])
    fields = source.record(RunFiles.DATACARD_JSON).get("fields", {})
    metrics = source.record(RunFiles.METRICS)
    git = source.git
    commit = f"{git.get('commit', 'unknown')}{' (tree differed from it)' if git.get('dirty') else ''}"
    rows = [
        f"| {split} | " + " | ".join(str(metrics.get(split, {}).get(key, "–")) for key, _ in METRICS) + " |"
        for split in records.SPLITS
    ]
    license_text = matter["license"] + (f" ({matter['license_name']})" if "license_name" in matter else "")
    name = matter["model-index"][0]["results"][0]["dataset"]["name"]
    lines = [
        "---",
        yaml.safe_dump(matter, sort_keys=False, allow_unicode=True).rstrip("\n"),
        "---",
        "",
        f"# solomon-{source.run_id}",
        "",
        f"{architecture(config)} trained by Solomon on {name}. Load it with "
        f"`{config['architectures'][0]}.from_pretrained` (or `AutoModelForCausalLM`) and `AutoTokenizer`; "
        "`generation_config.json` holds the run's sampling settings. It was trained on windows of "
        f"{source.model.config.block_size} positions, prompt included: Solomon's own sampler slides its window over "
        "the last ones.",
        "",
        "## Provenance",
        "",
        "| what | value |",
        "|---|---|",
        f"| run id | `{source.run_id}` |",
        f"| manifest SHA256 (the run's identity) | `{source.manifest_sha256}` |",
        f"| weights SHA256 (the run's `{records.WEIGHTS}`) | `{source.sha256[records.WEIGHTS]}` |",
        f"| git commit | `{commit}` |",
        "",
        "`provenance.json` holds the SHA256 of every run file this export was made from and of every file here. "
        "`solomon verify --export <this directory>`, in the repository that trained the run, verifies the run, "
        "re-hashes these files and compares every tensor, mapped back to Solomon's names, with the run's weights "
        "bit for bit.",
        "",
        "## Held-out metrics",
        "",
        "| split | " + " | ".join(name for _, name in METRICS) + " |",
        "|---|" + "---|" * len(METRICS),
        *rows,
        "",
        "## Training data",
        "",
        f"{name}. License: {license_text}. " + (fields.get("license_details") or ""),
        "",
    ]
    for key, title in (("uses", "Uses"), ("known_limitations", "Limitations")):
        if fields.get(key):
            lines += [f"## {title}", "", fields[key], ""]
    return "\n".join(lines)
