"""nanoGPT trained on Solomon's token files for the same wall time as a Solomon run, then scored by Solomon.

nanoGPT is not vendored: the user passes a checkout of karpathy/nanoGPT at ``COMMIT`` and its own ``train.py``,
``model.py`` and ``configurator.py`` run unchanged, in a scratch directory that holds them beside Solomon's
train/val tokens in nanoGPT's layout (``data/<dataset>/{train,val}.bin``, uint16, and ``meta.pkl``). Its recipe is
its own small-model one (``config/train_shakespeare_char.py``) at the shape of the Solomon run it is set beside;
its ``bf16`` variant changes one line of ``train.py`` so that it trains under bf16 autocast on CPU too (``PATCH``),
as Solomon does on a host with native bf16 matmuls;
its ``max_iters`` (and with it its cosine decay) is sized from a short timing run so that its training takes the
Solomon run's wall time. Its best checkpoint (nanoGPT keeps the one with the lowest val estimate) is then loaded
into Solomon's GPT, the same architecture under other names, and scored by the evaluate stage's code on the whole
val and test splits, as any Solomon model is.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import torch

from solomon.errors import SolomonError, last_line
from solomon.evaluation.evaluate import evaluate
from solomon.hashing import sha256_file
from solomon.model import weights
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import EvalParams
from solomon.records import TOKENIZER, TOKENS_DIR

REPOSITORY = "https://github.com/karpathy/nanoGPT"
COMMIT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"  # the newest commit of 2026-12-01 ("mention nanochat")
FILES = ("train.py", "model.py", "configurator.py")
DATASET = "solomon"
# nanoGPT's recipe for a small model (config/train_shakespeare_char.py), CPU settings, and what Solomon sets:
RECIPE = {
    "learning_rate": 1e-3,  # "with baby networks can afford to go a bit higher"
    "min_lr": 1e-4,  # learning_rate / 10: the cosine decay's floor, reached at lr_decay_iters
    "beta2": 0.99,  # "bigger because number of tokens per iter is small"
    "warmup_iters": 100,
    "dropout": 0.2,
    "weight_decay": 0.1,  # train.py's default, as grad_clip 1.0 and beta1 0.9
    "bias": False,
    "gradient_accumulation_steps": 1,
    "always_save_checkpoint": False,  # keep the checkpoint of the best val estimate, as its small recipe does
    "device": "cpu",
    "dtype": "float32",  # what it trains in on CPU (its autocast is CUDA's); said, so no GradScaler is built
    "compile": False,  # on CPU without a compiler toolchain set up; Solomon's default does not compile either
    "log_interval": 10,
}
# Its variants: as committed, or with train.py's autocast context on CPU too (its autocast is CUDA-only), in bf16.
# The patch is this one line, replaced where it is found exactly once.
PATCH = (
    "ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)",
    "ctx = torch.amp.autocast(device_type=device_type, dtype=ptdtype)",
)
VARIANTS = {"stock": {}, "bf16": {"dtype": "bfloat16"}}  # variant → its RECIPE overrides (bf16: with PATCH)
MODEL_SHAPE = ("n_layer", "n_head", "n_embd", "block_size")  # model.* of the Solomon run; and train.batch_size
TIMING_ITERS = 40  # the timing run's iterations; the first TIMING_SKIP are not counted (warm-up of the allocator)
TIMING_SKIP = 10
TIME_TOLERANCE = 0.03  # how far its loop's time may miss the Solomon run's before it is resized and run again
EVALS = 8  # evaluations after step 0 (nanoGPT's eval_interval = max_iters / EVALS; it evaluates at step 0 too)
# The line nanoGPT prints last before its loop (model.py's configure_optimizers): its training time starts here.
LOOP_START = re.compile(r"^using fused AdamW: ")
ITER_LINE = re.compile(r"^iter (\d+): loss ([\d.]+), time ([\d.]+)ms")
EVAL_LINE = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def check_checkout(checkout: Path) -> str:
    """The checkout's commit, which must be ``COMMIT`` with its three files as committed."""
    missing = [name for name in FILES if not (checkout / name).is_file()]
    if missing:
        raise SolomonError(f"{checkout} is not a nanoGPT checkout ({missing[0]} is missing): git clone {REPOSITORY}")
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--", *FILES], capture_output=True, text=True
    )
    if head.returncode or head.stdout.strip() != COMMIT or changed.stdout.strip():
        raise SolomonError(
            f"{checkout} is not nanoGPT at {COMMIT[:8]} with {', '.join(FILES)} unchanged: "
            f"run `git -C {checkout} checkout {COMMIT}` (another commit is another comparison)"
        )
    return COMMIT


def variants_for(bf16_native: bool) -> tuple[str, ...]:
    """The variants worth running on a host: bf16 only where its matmuls are native (elsewhere it is slower)."""
    return ("stock", "bf16") if bf16_native else ("stock",)


def patch_autocast(source: str) -> str:
    """train.py with its CPU autocast on: ``PATCH`` applied, refused where its line is not there exactly once."""
    old, new = PATCH
    if source.count(old) != 1:
        raise SolomonError(f"nanoGPT's train.py does not hold its autocast line once ({old!r}): is it {COMMIT[:8]}?")
    return source.replace(old, new)


def prepare(checkout: Path, tokens_dir: Path, scratch: Path, vocab_size: int, variant: str = "stock") -> Path:
    """nanoGPT's files (its ``variant``) and Solomon's tokens in nanoGPT's layout, in ``scratch``; returns its
    working directory."""
    work = scratch / "nanogpt"
    data = work / "data" / DATASET
    data.mkdir(parents=True)
    for name in FILES:
        shutil.copyfile(checkout / name, work / name)
    if variant == "bf16":
        train = work / "train.py"
        train.write_text(patch_autocast(train.read_text(encoding="utf-8")), encoding="utf-8")
    for split in ("train", "val"):  # nanoGPT reads uint16 tokens, Solomon's own dtype at this vocabulary
        shutil.copyfile(tokens_dir / f"{split}.bin", data / f"{split}.bin")
    with open(data / "meta.pkl", "wb") as handle:
        pickle.dump({"vocab_size": vocab_size}, handle)
    return work


def _train(work: Path, settings: dict, threads: int, out_dir: str, env: dict[str, str]
           ) -> tuple[list[tuple[float, str]], float, float]:  # fmt: skip
    """Run nanoGPT's train.py with ``settings`` (its command-line overrides); return (its stdout lines, each with
    the seconds since its loop began when it came; its loop's wall seconds; the whole process's)."""
    args = [f"--{key}={value}" for key, value in settings.items()] + [f"--dataset={DATASET}", f"--out_dir={out_dir}"]
    env = env | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "train.py", *args], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines = [(time.monotonic() - start, line.rstrip("\n")) for line in process.stdout]
    process_s = time.monotonic() - start
    if process.wait():
        output = chr(10).join(text for _, text in lines)
        raise SolomonError(f"nanoGPT's train.py exited {process.returncode}: {last_line(output)}")
    begun = next((t for t, line in lines if LOOP_START.match(line)), None)
    if begun is None:
        raise SolomonError("nanoGPT printed no `using fused AdamW` line before its loop: is this its train.py?")
    return [(round(t - begun, 3), line) for t, line in lines], round(process_s - begun, 1), round(process_s, 1)


def seconds_per_iter(work: Path, recipe: dict, shape: dict, threads: int, env: dict[str, str]) -> float:
    """nanoGPT's own per-iteration time at this shape, from a short run (its ``time …ms`` lines)."""
    settings = recipe | shape | {"max_iters": TIMING_ITERS, "eval_interval": 10**6, "eval_iters": 1, "log_interval": 1}
    lines, _, _ = _train(work, settings, threads, "out-timing", env)
    times = [float(m[3]) / 1000 for _, line in lines if (m := ITER_LINE.match(line)) and int(m[1]) >= TIMING_SKIP]
    if not times:
        raise SolomonError("nanoGPT's timing run printed no `iter` lines: is the checkout nanoGPT's train.py?")
    return sorted(times)[len(times) // 2]


def run(checkout: Path, tokens_dir: Path, tokenizer: Path, scratch: Path, shape: dict, seconds: float,
        threads: int, eval_tokens: int, eval_params: EvalParams, env: dict[str, str],
        variant: str = "stock") -> dict:  # fmt: skip
    """Train nanoGPT (its ``variant``) for about ``seconds`` at ``shape`` and score it with ``eval_params``; return
    its record (settings, times, curves, Solomon's metrics of its model, reliability bins), its files staying in
    ``scratch``. ``env`` is its process's environment (``nanogpt_environment``), threads and unbuffered output added."""
    commit = check_checkout(checkout)
    meta = json.loads((tokens_dir / "meta.json").read_text(encoding="utf-8"))
    if meta["dtype"] != "<u2":  # nanoGPT's get_batch reads uint16, whatever the vocabulary
        raise SolomonError(f"{tokens_dir} holds {meta['dtype']} tokens (vocabulary {meta['vocab_size']}); "
                           "nanoGPT reads uint16 only: compare at tokenizer.vocab_size ≤ 65536")  # fmt: skip
    vocab_size = meta["vocab_size"]
    work = prepare(checkout, tokens_dir, scratch, vocab_size, variant)
    recipe = RECIPE | VARIANTS[variant]
    per_iter = seconds_per_iter(work, recipe, shape, threads, env)
    # Its evaluations take time too: EVALS + 1 of them (step 0 included), each eval_iters batches of train and of
    # val, sized as Solomon's eval subset; a batch without backward costs about a third of a training iteration.
    eval_iters = max(1, round(eval_tokens / (shape["batch_size"] * shape["block_size"])))
    eval_s = (EVALS + 1) * 2 * eval_iters * per_iter / 3
    max_iters = EVALS * max(1, round((seconds - eval_s) / per_iter / EVALS))
    attempts = []
    while True:  # a second attempt, resized by the first one's own time, where the timing run's estimate missed
        settings = recipe | shape | {"max_iters": max_iters, "lr_decay_iters": max_iters,
                                     "eval_interval": max_iters // EVALS, "eval_iters": eval_iters}  # fmt: skip
        shutil.rmtree(work / "out", ignore_errors=True)
        lines, wall_s, process_s = _train(work, settings, threads, "out", env)
        attempts.append({"max_iters": max_iters, "wall_s": wall_s})
        if abs(wall_s / seconds - 1) <= TIME_TOLERANCE or len(attempts) == 2:
            break
        max_iters = EVALS * max(1, round(max_iters * seconds / wall_s / EVALS))
    evals = [
        {"step": int(m[1]), "train_loss": float(m[2]), "val_loss": float(m[3]), "t": t}
        for t, line in lines
        if (m := EVAL_LINE.match(line))
    ]
    iters = [
        {"iter": int(m[1]), "loss": float(m[2]), "ms": float(m[3]), "t": t}
        for t, line in lines
        if (m := ITER_LINE.match(line))
    ]
    model_dir, reliability = scratch / "model", scratch / "reliability"
    if not (work / "out" / "ckpt.pt").is_file():  # nanoGPT saves only after iteration 0, on a better val estimate
        raise SolomonError(f"nanoGPT wrote no checkpoint in {max_iters} iterations: its val estimate never improved")
    checkpoint = torch.load(work / "out" / "ckpt.pt", map_location="cpu", weights_only=False)
    weights.save(to_solomon(checkpoint["model"], checkpoint["model_args"]), model_dir)
    metrics = evaluate(
        EvalParams(threads=threads), model_dir, tokens_dir, tokenizer, scratch / "metrics.json", reliability
    )
    return {
        "nanogpt": {
            "repository": REPOSITORY,
            "commit": commit,
            "variant": variant,
            "settings": settings,
            "threads": threads,
        },
        "timing": {"seconds_per_iter": per_iter, "target_s": seconds, "attempts": attempts},
        "wall_s": wall_s,  # its loop's (from the line it prints last before it), as Solomon's training time
        "process_s": process_s,  # from the interpreter's start: imports, data, model and optimiser built
        "updates": max_iters + 1,  # it steps at iterations 0 … max_iters and stops after the last
        "best_iter": int(checkpoint["iter_num"]),  # the checkpoint scored: its best val estimate
        "tokens": (max_iters + 1) * shape["batch_size"] * shape["block_size"],
        "data": {split: sha256_file(tokens_dir / f"{split}.bin") for split in ("train", "val", "test")},
        "model_sha256": sha256_file(model_dir / weights.WEIGHTS_FILE),
        "metrics": metrics,
        "evals": evals,
        "iters": iters,
        "reliability": {split: json.loads((reliability / f"{split}.json").read_text()) for split in ("val", "test")},
    }


# nanoGPT's names → Solomon's: the same pre-LayerNorm GPT-2 block, learned positions and tied embeddings.
RENAMES = (
    ("transformer.wte.", "wte."),
    ("transformer.wpe.", "wpe."),
    ("transformer.ln_f.", "ln_f."),
    ("transformer.h.", "blocks."),
    (".attn.c_attn.", ".attn.qkv."),
    (".attn.c_proj.", ".attn.proj."),
    (".mlp.c_fc.", ".mlp.fc."),
    (".mlp.c_proj.", ".mlp.proj."),
)


def to_solomon(state: dict, model_args: dict) -> GPT:
    """nanoGPT's model state (``ckpt.pt``'s ``model``; ``_orig_mod.`` stripped where it was compiled) as Solomon's
    GPT; every tensor must find its place."""
    config = GPTConfig(**{key: model_args[key] for key in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")},
                       bias=model_args["bias"])  # fmt: skip
    renamed = {}
    for name, tensor in state.items():
        name = name.removeprefix("_orig_mod.")
        for old, new in RENAMES:
            name = name.replace(old, new)
        renamed[name] = tensor
    model = GPT(config)
    missing, unexpected = model.load_state_dict(renamed, strict=False)
    if [m for m in missing if m != weights.TIED] or unexpected:
        raise SolomonError(
            f"nanoGPT's checkpoint does not map onto Solomon's GPT: missing {missing}, unexpected {unexpected}"
        )
    return model.eval()


def nanogpt_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """nanoGPT's process environment from the caller's: only PATH and HOME, since an inherited RANK or WORLD_SIZE
    (a torchrun or a pod) would start its NCCL DDP."""
    return {"PATH": environ.get("PATH", ""), "HOME": environ.get("HOME", "/")}


def beside(solomon: dict, checkout: Path, root: Path, scratch: Path, env: dict[str, str],
           variant: str = "stock") -> dict:  # fmt: skip
    """nanoGPT (its ``variant``) at the shape, threads and training wall time of the Solomon run ``solomon`` (a docs
    page's results), on the workspace's tokens (``root``'s data/), scored as that run's params say; the record
    names that run."""
    params, train_run = solomon["params"], solomon["train_run"]
    shape = {key: params["model"][key] for key in MODEL_SHAPE} | {"batch_size": params["train"]["batch_size"]}
    record = run(checkout, root / TOKENS_DIR, root / TOKENIZER, scratch, shape, train_run["wall_s"],
                 train_run["threads"], params["train"]["eval_tokens"], EvalParams(**params["eval"]), env,
                 variant)  # fmt: skip
    return record | {"against": {"run_id": train_run["run_id"], "wall_s": train_run["wall_s"]}}
