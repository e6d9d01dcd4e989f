"""`make isa-check`: which kernels give other bits on another x86-64 instruction set, op by op, on one machine.

Every op (and the pieces of one tiny training step) runs on seeded inputs in three child processes of the same
interpreter: natively as torch chooses, natively pinned to the AVX2 path every x86-64 host with AVX2 has
(``PINNED``: the portable mode's settings, one thread), and pinned under ``qemu-x86_64`` on two emulated AVX2-only
CPUs, an AMD and an Intel (``lab.emulate``). Each output is hashed; the table says, per op, whether
pinning changes it and whether the pinned result is the emulated CPU's. The record goes to
``reports/bench/isa-<time>.json`` and the table to docs/portable.md's generated block.

    python -m lab.isa [--emit]    (--emit: this process's hashes as JSON, what each child prints)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from lab.emulate import EMULATORS, emulated_env, python_command, require_emulator
from solomon.portable import PINNED_ENV

ROOT = Path(__file__).resolve().parents[1]
PINNED = PINNED_ENV  # the portable mode's settings (one thread besides: the children run one)
PAGE = ROOT / "docs/portable.md"
START, END = "<!-- isa:start -->", "<!-- isa:end -->"


def ops() -> dict[str, Callable]:
    """Each op's output on seeded inputs (fp32), by name; the training pieces on a tiny model of each block."""
    import torch
    import torch.nn.functional as F

    from solomon.train.muon import BatchedMuon

    torch.manual_seed(0)
    x, w = torch.randn(64, 256), torch.randn(256, 256)
    q = x.view(1, 4, 16, 256)
    found: dict[str, Callable] = {
        "matmul": lambda: x @ w,
        "exp": x.exp,
        "tanh": x.tanh,
        "sigmoid": x.sigmoid,
        "erf": x.erf,
        "SiLU": lambda: F.silu(x),
        "GELU, exact": lambda: F.gelu(x),
        "GELU, exact, in float64": lambda: F.gelu(x.double()).float(),
        "GELU, tanh form": lambda: F.gelu(x, approximate="tanh"),
        "sqrt": lambda: x.abs().sqrt(),
        "sqrt, in float64": lambda: x.abs().double().sqrt().float(),
        "rsqrt": lambda: x.abs().rsqrt(),
        "division": lambda: x / (x.abs() + 1),
        "sum": lambda: x.sum(-1),
        "log_softmax": lambda: torch.log_softmax(x, -1),
        "LayerNorm": lambda: F.layer_norm(x, (256,)),
        "causal SDPA": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "matmul, bf16": lambda: x.bfloat16() @ w.bfloat16(),
        "linear under bf16 autocast": lambda: _autocast(lambda: F.linear(x, w)),
        "dropout mask": lambda: _seeded(lambda: F.dropout(torch.ones(64, 256), 0.2)),
        "multinomial sample": lambda: _seeded(lambda: torch.multinomial(torch.softmax(x, -1), 4).float()),
        "AdamW step, fused": lambda: _optimizer_step(lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True)),
        "AdamW step, foreach": lambda: _optimizer_step(lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True)),
        "Muon step": lambda: _optimizer_step(lambda p: torch.optim.Muon(p, lr=1e-3, adjust_lr_fn="match_rms_adamw")),
        "Muon step, fp32 Newton-Schulz": lambda: _optimizer_step(
            lambda p: BatchedMuon(p, lr=1e-3, adjust_lr_fn="match_rms_adamw", ns_dtype=torch.float32)
        ),
    }
    for family, options in (("GPT-2 block", {}), ("rotary + QK-norm + squared ReLU", _MODERN)):
        found |= {f"{family}: {piece}": make for piece, make in _step_pieces(options).items()}
    return found


def _autocast(make: Callable):
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16):
        return make()


def _seeded(make: Callable):
    import torch

    torch.manual_seed(1)
    return make()


def _optimizer_step(make: Callable):
    """Three steps of an optimiser on one 256 × 256 weight with seeded gradients: the weight after them."""
    import torch

    torch.manual_seed(2)
    weight = torch.nn.Parameter(torch.randn(256, 256))
    optimizer = make([weight])
    for _ in range(3):
        weight.grad = torch.randn(256, 256)
        optimizer.step()
    return weight.detach()


_MODERN = {"position": "rotary", "qk_norm": True, "activation": "relu2"}


def _step_pieces(options: dict) -> dict[str, Callable]:
    """One step of a tiny model: forward logits, loss, every gradient, the clipped norm, one AdamW step."""
    import torch

    from solomon.model.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=512, block_size=32, n_layer=2, n_head=2, n_embd=64, **options))
    ids, targets = torch.randint(0, 512, (8, 32)), torch.randint(0, 512, (8, 32))
    logits = model(ids)
    loss = model(ids, targets) / targets.numel()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True).step()  # training's AdamW
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {
        "forward": lambda: logits,
        "loss": lambda: loss,
        "gradients": lambda: grads,
        "clipped norm": lambda: norm,
        "AdamW step": lambda: after,
    }


def emit() -> dict[str, str]:
    import torch

    torch.set_num_threads(1)
    hashes = {}
    for name, make in ops().items():
        out = make().detach().contiguous().float()
        hashes[name] = hashlib.sha256(out.numpy().tobytes()).hexdigest()
    return hashes | {"capability": torch.backends.cpu.get_cpu_capability()}


def run(emulator: str | None, pinned: bool) -> dict[str, str]:
    """``--emit`` in a child: this interpreter, natively or under ``emulator`` (``lab.emulate.EMULATORS``)."""
    from lab.scratch import lab_env  # here, not at the top: the emulated child imports this module too

    env = lab_env() | (PINNED if pinned else {}) | {"OMP_NUM_THREADS": "1"}
    if emulator:
        env = emulated_env(env)
    done = subprocess.run(
        [*python_command(emulator), "-m", "lab.isa", "--emit"], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"isa: {emulator or 'native'} run failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def table(record: dict) -> str:
    native, pinned, emulated = record["native"], record["pinned"], record["emulated"]
    rows = [
        "| op | pinning changes it | " + " | ".join(f"pinned = emulated {name}" for name in emulated) + " |",
        "|---|---|" + "---|" * len(emulated),
    ]
    for name in sorted(native, key=str.lower):  # the record's JSON sorts its keys: so does the table
        changes = "yes" if native[name] != pinned[name] else "no"
        same = ["**equal**" if pinned[name] == hashes[name] else "differs" for hashes in emulated.values()]
        rows.append(f"| {name} | {changes} | " + " | ".join(same) + " |")
    return "\n".join(rows)


def render(record: dict) -> str:
    """The page's generated block from a record."""
    host, caps = record["machine"]["kind"], record["capabilities"]
    emulated = ", ".join(f"{name} {cap}" for name, cap in caps["emulated"].items())
    head = (
        f"<!-- generated by `python -m lab.isa` from reports/bench/isa-{record['time']}.json: do not edit -->\n\n"
        f"Measured {record['time']} on `{host}`; torch's capability natively {caps['native']}, pinned "
        f"{caps['pinned']}, emulated (qemu-x86_64 -cpu …) {emulated}. Settings pinned: "
        + ", ".join(f"`{k}={v}`" for k, v in PINNED.items())
        + ".\n\n"
    )
    return head + table(record) + "\n"


def write_page(record: dict) -> Path:
    text = PAGE.read_text(encoding="utf-8")
    before, _, rest = text.partition(START)
    _, _, after = rest.partition(END)
    PAGE.write_text(f"{before}{START}\n{render(record)}{END}{after}", encoding="utf-8")
    return PAGE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--emit", action="store_true", help="print this process's hashes as JSON")
    args = parser.parse_args()
    if args.emit:
        print(json.dumps(emit()))
        return
    require_emulator()
    from solomon.atomic import write_json
    from solomon.machine import describe

    native, pinned = run(None, False), run(None, True)
    emulated = {name: run(name, True) for name in EMULATORS}
    record = {
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ"),
        "machine": describe(),
        "capabilities": {
            "native": native.pop("capability"),
            "pinned": pinned.pop("capability"),
            "emulated": {name: hashes.pop("capability") for name, hashes in emulated.items()},
        },
        "native": native,
        "pinned": pinned,
        "emulated": emulated,
    }
    out = ROOT / "reports/bench" / f"isa-{record['time']}.json"
    write_json(out, record)
    print(table(record))
    print(f"record: {out}\npage: {write_page(record)}")


if __name__ == "__main__":
    main()
