"""Exports of a run (issue 29): the Hugging Face directory loads in real `transformers` and computes Solomon's own
logits and greedy continuations; the GGUF file reads back with `gguf`'s own reader to the run's tensors bit for
bit; `verify_export` passes on each and fails, in one line naming what differs, on every tamper; a run that does
not verify, or an `--out` that is not an earlier export of the same run, is refused with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import torch
import yaml
from conftest import dvc, flip_last_byte, latest_run_dir, one_line_refusal, rehash_export, tree_digest
from safetensors.torch import load_file, save_file

from lab.scratch import write_params
from solomon.atomic import write_json
from solomon.audit import manifest
from solomon.data.tokens import load_tokenizer
from solomon.export import record
from solomon.export.check import verify_export
from solomon.export.gguf_file import GGUF_FILE, export_gguf
from solomon.export.hf import export_hf
from solomon.export.layout import exported, mismatch, slots
from solomon.export.mlflow_model import export_mlflow
from solomon.model import weights
from solomon.model.gpt import GPT, GPTConfig
from solomon.model.sampling import generate

PROMPTS = ("In the beginning", "And the LORD said unto Moses", "Blessed are")
torch.set_num_threads(1)


def copy(export_dir: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    return Path(shutil.copytree(export_dir, dest))


def test_layout_maps_back_exactly_and_names_the_first_difference() -> None:
    """The rename/transpose round trip on a fresh model (no pipeline): each tensor comes back bit for bit."""
    model = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, n_embd=16))
    state = {k: v for k, v in model.state_dict().items() if k != weights.TIED}
    layout = slots(model.config)
    assert {s.source for s in layout if s.source} == set(state)
    assert len(layout) == 2 + 12 * 2 + 2  # embeddings, 6 weights + 6 (zero) biases a block, final norm
    for hf in (True, False):
        for slot in layout:
            assert mismatch(slot, exported(slot, state, hf), state, hf) is None
    qkv = next(s for s in layout if s.hf == "transformer.h.1.attn.c_attn.weight")
    tensor = exported(qkv, state, hf=True).clone()
    assert tuple(tensor.shape) == (16, 48)  # Conv1D: [in, out]
    tensor[3, 5] = torch.nextafter(tensor[3, 5], torch.tensor(1.0))
    assert "first difference at index (3, 5) as written" in mismatch(qkv, tensor, state, hf=True)
    bias = next(s for s in layout if s.gguf == "blk.0.ffn_up.bias")
    assert "all zeros" in mismatch(bias, torch.full((64,), -0.0), state, hf=False)  # -0.0: not the bits of zero


def test_hf_export_loads_in_transformers_and_computes_solomons_logits(family_repo, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, GPT2LMHeadModel, PreTrainedTokenizerFast

    repo = family_repo("gpt2")  # GPT-2's layout in transformers and GGUF
    run_dir = latest_run_dir(repo)
    out = export_hf(run_dir, repo, tmp_path / "hf")
    hyper = yaml.safe_load((run_dir / "hyperparameters.yaml").read_text())
    ours = weights.load(repo / "models")
    tokenizer = load_tokenizer(repo / "data/tokenizer.json")
    eod = tokenizer.token_to_id(hyper["tokenizer"]["eod_token"])

    theirs = GPT2LMHeadModel.from_pretrained(out).eval()
    auto = AutoTokenizer.from_pretrained(out)
    assert isinstance(auto, PreTrainedTokenizerFast) and auto.eos_token_id == eod == auto.bos_token_id
    assert theirs.generation_config.temperature == hyper["train"]["samples"]["temperature"]
    worst = 0.0
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt).ids
        assert auto(prompt)["input_ids"] == ids
        with torch.no_grad():
            logits = theirs(torch.tensor([ids])).logits
            worst = max(worst, float((logits - ours(torch.tensor([ids]))).abs().max()))
        # Greedy decoding both ways: Solomon's sampler with top-k 1 is the argmax.
        greedy = generate(ours, ids, 32, 1.0, 1, torch.Generator().manual_seed(0), stop_id=eod)
        room = ours.config.block_size - len(ids)  # transformers' GPT-2 stops at n_positions
        done = theirs.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=room, min_new_tokens=room)
        new = done[0, len(ids) :].tolist()
        assert new[: new.index(eod) if eod in new else room] == greedy[:room]
        window, sliding = list(ids), []  # 32 tokens, past n_positions: the last block_size tokens, as Solomon crops
        for _ in range(32):
            with torch.no_grad():
                step = int(theirs(torch.tensor([window[-ours.config.block_size :]])).logits[0, -1].argmax())
            if step == eod:
                break
            sliding.append(step)
            window.append(step)
        assert sliding == greedy, prompt
    print(f"max abs logit difference, transformers vs Solomon (fp32): {worst:.3g}")
    assert worst < 1e-4

    provenance = json.loads((out / record.PROVENANCE).read_text())
    config = json.loads((out / "config.json").read_text())
    digest = manifest.digest_of((run_dir / "manifest.json").read_bytes())
    assert config["solomon"]["manifest_sha256"] == provenance["manifest_sha256"] == digest
    assert provenance["files"] == record.exported_files(out) and "README.md" in provenance["files"]
    card = (out / "README.md").read_text()
    matter = yaml.safe_load(card.split("---\n")[1])
    datacard = json.loads((run_dir / "datacard.json").read_text())["front_matter"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert matter["license"] == datacard["license"] and matter["pipeline_tag"] == "text-generation"
    assert matter["model-index"][0]["results"][0]["metrics"][1]["value"] == metrics["val"]["perplexity"]
    assert provenance["run_id"] in card and provenance["manifest_sha256"] in card
    assert verify_export(out, repo).startswith(f"{out}: hf export of run {provenance['run_id']} verified")

    before = tree_digest(out)
    export_hf(run_dir, repo, out)  # an earlier export of the same run is replaced: the same bytes
    assert tree_digest(out) == before


def test_gguf_export_reads_back_to_the_runs_tensors_bit_for_bit(family_repo, tmp_path: Path) -> None:
    repo = family_repo("gpt2")  # GPT-2's layout in transformers and GGUF
    run_dir = latest_run_dir(repo)
    path = export_gguf(run_dir, repo, tmp_path / "gguf")
    state = load_file(str(repo / "models/model.safetensors"))
    config = json.loads((repo / "models/config.json").read_text())
    provenance = json.loads((path.parent / record.PROVENANCE).read_text())
    reader = gguf.GGUFReader(path)
    fields = {key: field.contents() for key, field in reader.fields.items()}
    assert fields["general.architecture"] == "gpt2" and fields["tokenizer.ggml.model"] == "gpt2"
    assert fields["solomon.run_id"] == run_dir.name == provenance["run_id"]
    assert fields["solomon.manifest_sha256"] == provenance["manifest_sha256"]
    assert fields["gpt2.context_length"] == config["block_size"] and fields["gpt2.block_count"] == config["n_layer"]
    tokenizer = load_tokenizer(repo / "data/tokenizer.json")
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    assert fields["tokenizer.ggml.tokens"] == [token for token, _ in vocab]
    assert fields["tokenizer.ggml.eos_token_id"] == tokenizer.token_to_id("<|endoftext|>")

    names = {"token_embd.weight": "wte.weight", "position_embd.weight": "wpe.weight"}
    names["output_norm.weight"] = "ln_f.weight"
    for i in range(config["n_layer"]):
        for theirs, own in (("attn_norm", "ln_1"), ("attn_qkv", "attn.qkv"), ("attn_output", "attn.proj"),
                            ("ffn_norm", "ln_2"), ("ffn_up", "mlp.fc"), ("ffn_down", "mlp.proj")):  # fmt: skip
            names[f"blk.{i}.{theirs}.weight"] = f"blocks.{i}.{own}.weight"
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == set(names) | {name.replace(".weight", ".bias") for name in names if "embd" not in name}
    for name, tensor in tensors.items():
        data = torch.from_numpy(tensor.data.copy())
        if name in names:
            assert data.numpy().tobytes() == state[names[name]].numpy().tobytes(), name
        else:
            assert not data.numpy().tobytes().strip(b"\0"), name  # a bias Solomon has not: zero bits
    assert verify_export(path.parent, repo).startswith(f"{path.parent}: gguf export of run {run_dir.name}")


def test_verify_export_fails_on_every_tamper(family_repo, tmp_path: Path) -> None:
    repo = family_repo("gpt2")  # GPT-2's layout in transformers and GGUF
    run_dir = latest_run_dir(repo)
    hf_out = export_hf(run_dir, repo, tmp_path / "hf")
    gguf_out = export_gguf(run_dir, repo, tmp_path / "gguf").parent

    def nudge_tensor(export: Path, name: str) -> None:
        tensors = load_file(str(export / "model.safetensors"))
        tensors[name].view(-1)[7] = torch.nextafter(tensors[name].view(-1)[7], torch.tensor(9.0))
        save_file(tensors, str(export / "model.safetensors"), metadata={"format": "pt"})

    def nudge_gguf(export: Path, name: str) -> None:
        tensor = next(t for t in gguf.GGUFReader(export / GGUF_FILE).tensors if t.name == name)
        with open(export / GGUF_FILE, "r+b") as handle:  # the lowest mantissa bit of its first element
            handle.seek(tensor.data_offset)
            first = handle.read(1)
            handle.seek(tensor.data_offset)
            handle.write(bytes([first[0] ^ 1]))

    def edit_config(export: Path) -> None:
        config = json.loads((export / "config.json").read_text())
        write_json(export / "config.json", config | {"n_head": 1})

    cases = [
        (hf_out, lambda e: nudge_tensor(e, "transformer.h.0.attn.c_attn.weight"), True,
         "tensor transformer.h.0.attn.c_attn.weight is not the run's blocks.0.attn.qkv.weight bit for bit"),
        (hf_out, lambda e: nudge_tensor(e, "transformer.h.0.attn.c_attn.weight"), False,
         "model.safetensors: SHA256 mismatch"),
        (hf_out, lambda e: nudge_tensor(e, "transformer.h.1.mlp.c_fc.bias"), True,
         "tensor transformer.h.1.mlp.c_fc.bias is not all zeros"),
        (hf_out, edit_config, True, "config.json: not what run"),
        (hf_out, lambda e: (e / "tokenizer_config.json").unlink(), False, "tokenizer_config.json: missing"),
        (hf_out, lambda e: (e / "extra.bin").write_bytes(b"x"), True, "extra.bin: not a file of a hf export"),
        (gguf_out, lambda e: nudge_gguf(e, "blk.1.ffn_up.weight"), True,
         "tensor blk.1.ffn_up.weight is not the run's blocks.1.mlp.fc.weight bit for bit"),
        (gguf_out, lambda e: nudge_gguf(e, "blk.0.attn_qkv.weight"), False, "model.gguf: SHA256 mismatch"),
        (gguf_out, lambda e: (e / GGUF_FILE).unlink(), False, "model.gguf: missing"),
        (gguf_out, lambda e: (e / record.PROVENANCE).unlink(), False, "provenance.json: missing"),
        (gguf_out, lambda e: write_json(e / record.PROVENANCE, json.loads((e / record.PROVENANCE).read_text())
                                        | {"run_id": "20990101T000000Z-00000000"}), False,
         "names run 20990101T000000Z-00000000, which is not among the runs"),
        (hf_out, lambda e: write_json(e / record.PROVENANCE, json.loads((e / record.PROVENANCE).read_text())
                                      | {"manifest_sha256": "0" * 64}), False, "made from another manifest"),
    ]  # fmt: skip
    for index, (export, tamper, forged, expected) in enumerate(cases):
        tampered = copy(export, tmp_path / f"case{index}")
        tamper(tampered)
        if forged:
            rehash_export(tampered)
        message = one_line_refusal(verify_export, tampered, repo)
        assert expected in message, (expected, message)
    for export in (hf_out, gguf_out):  # the originals were never touched
        assert "verified" in verify_export(export, repo)


def test_refusals_write_nothing_and_a_foreign_provenance_fails(repo_copy: Path, tmp_path: Path) -> None:
    first = latest_run_dir(repo_copy)
    out = tmp_path / "exports" / "hf"
    weights_file = repo_copy / "models/model.safetensors"
    backup = weights_file.read_bytes()
    flip_last_byte(weights_file)
    message = one_line_refusal(export_hf, first, repo_copy, out)
    assert "does not verify: models/model.safetensors: SHA256 mismatch" in message
    assert "does not verify" in one_line_refusal(export_gguf, first, repo_copy, out)
    assert "does not verify" in one_line_refusal(export_mlflow, first, repo_copy, out)
    assert not out.parent.exists() or not list(out.parent.iterdir())  # not even a staging directory is left
    weights_file.write_bytes(backup)

    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    for export in (export_hf, export_gguf, export_mlflow):
        assert "exists and is not a Solomon export" in one_line_refusal(export, first, repo_copy, occupied)
    assert (occupied / "notes.txt").read_text() == "mine" and len(list(occupied.iterdir())) == 1
    export_hf(first, repo_copy, out)

    write_params(repo_copy, {"lr": {"warmup": 10}})  # a second run of the same pipeline
    shutil.rmtree(repo_copy / "checkpoints")
    dvc(repo_copy, "repro")
    second = latest_run_dir(repo_copy)
    assert second != first
    other = export_hf(second, repo_copy, tmp_path / "exports" / "hf-second")
    assert "exists and is an export of another run" in one_line_refusal(export_hf, first, repo_copy, other)
    assert "verified" in verify_export(out, repo_copy)  # the first run's files from the DVC cache now
    assert "verified" in verify_export(other, repo_copy)

    foreign = copy(out, tmp_path / "foreign")
    shutil.copy(other / record.PROVENANCE, foreign / record.PROVENANCE)
    assert "SHA256 mismatch" in one_line_refusal(verify_export, foreign, repo_copy)


def test_the_commands_export_verify_and_refuse_a_tampered_export_in_one_line(repo_copy: Path, tmp_path: Path) -> None:
    """`solomon export` and `solomon verify --export` as a user runs them: exit 0 with one summary line each; a
    changed byte in an exported file is exit 2 with one line naming it; a run and --export together is refused."""
    import subprocess
    import sys

    from solomon.pipeline import pipeline_env

    solomon = str(Path(sys.executable).parent / "solomon")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([solomon, *args], cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True)

    for fmt in ("hf", "gguf", "mlflow"):
        out = tmp_path / fmt
        done = cli("export", "--format", fmt, "--out", str(out))
        assert done.returncode == 0, done.stderr
        checked = cli("verify", "--export", str(out))
        assert checked.returncode == 0 and len(checked.stdout.splitlines()) == 1, checked.stdout + checked.stderr
        assert "verified" in checked.stdout
    flip_last_byte(tmp_path / "hf" / "model.safetensors")
    tampered = cli("verify", "--export", str(tmp_path / "hf"))
    assert tampered.returncode == 2 and "model.safetensors" in tampered.stderr, tampered.stderr
    assert len(tampered.stderr.strip().splitlines()) == 1, tampered.stderr
    both = cli("verify", latest_run_dir(repo_copy).name, "--export", str(tmp_path / "gguf"))
    assert both.returncode != 0 and "not both" in both.stderr
