"""The architecture options (rotary positions, QK-norm, squared ReLU) and the llama block family: what each computes,
that a GPT-2 model's config keeps its bytes, that a model with options or of the llama family saves, loads, resumes
exactly, and that a gpt2 model with options is refused by the GPT-2-layout exports in one line. The serving engine's
tests run on a model with every option and on the llama family too (tests/test_engine.py)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from conftest import logged_steps, run_train, workdir
from test_resume import outcome

from solomon.errors import SolomonError
from solomon.export.layout import slots
from solomon.model import weights
from solomon.model.gpt import GPT, GPTConfig, Rotary, rotate
from solomon.model.kv_cache import KVCache, decode, prefill
from solomon.params import load_params

torch.set_num_threads(1)
EVERY_OPTION = {"position": "rotary", "qk_norm": True, "activation": "relu2"}
LLAMA = {"family": "llama", "position": "rotary", "activation": "swiglu"}  # a resolved llama config
QWEN3 = LLAMA | {"qk_norm": True}
CAPPED = QWEN3 | {"logit_softcap": 2.0}  # a cap low enough to bite at these random weights' logits
VALUE_EMBEDDED = QWEN3 | {"value_embeddings": 2}
SIZES = {"vocab_size": 61, "block_size": 24, "n_layer": 2, "n_head": 2, "n_embd": 32}


def model_with(seed: int = 0, **options) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**SIZES, **options)).eval()
    for table in model.value_embeds:  # zero at initialisation: made to matter here
        torch.nn.init.normal_(table.weight)
    return model


def test_rotary_attention_scores_depend_only_on_the_offset_between_positions() -> None:
    rotary = Rotary(head_dim=16, block_size=64)
    generator = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 1, 1, 1, 16, generator=generator, dtype=torch.float64).unbind(0)

    def score(query_at: int, key_at: int) -> float:
        rotated_q = rotate(q, rotary(torch.tensor([query_at])))
        rotated_k = rotate(k, rotary(torch.tensor([key_at])))
        return float((rotated_q * rotated_k).sum())

    assert score(9, 4) == pytest.approx(score(40, 35), rel=1e-6)
    assert score(9, 4) == pytest.approx(score(5, 0), rel=1e-6)
    assert score(9, 4) != pytest.approx(score(9, 5), rel=1e-3)  # another offset, another score
    assert torch.allclose(rotate(q, rotary(torch.tensor([0]))), q)  # position 0 is no rotation
    assert torch.linalg.norm(rotate(q, rotary(torch.tensor([33])))) == pytest.approx(float(torch.linalg.norm(q)))


def test_qk_norm_gives_every_head_unit_rms_queries_and_keys_and_relu2_is_relu_squared() -> None:
    model = model_with(qk_norm=True)
    x = torch.randn(1, 5, SIZES["n_embd"])
    q, k, _ = model.blocks[0].attn.heads(x, None)
    for tensor in (q, k):
        assert torch.allclose(tensor.pow(2).mean(-1), torch.ones(tensor.shape[:-1]), atol=1e-4)
    mlp = model_with(activation="relu2").blocks[0].mlp
    hidden = mlp.fc(x)
    assert torch.equal(mlp(x), mlp.proj(torch.relu(hidden) ** 2))


def test_a_gpt2_config_keeps_its_bytes_and_each_option_is_written_only_when_on() -> None:
    plain = GPTConfig(**SIZES)
    assert plain.options == {} and list(plain.to_dict()) == [*SIZES, "dropout", "bias"]
    for name, value in EVERY_OPTION.items():
        config = GPTConfig(**SIZES, **{name: value})
        assert config.options == {name: value} and config.to_dict()[name] == value
        assert GPTConfig(**config.to_dict()) == config
    rotary = model_with(position="rotary")
    assert rotary.wpe is None and not any("rotary" in name for name in rotary.state_dict())  # angles: not saved
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    logits = {name: model_with(**{name: value})(ids) for name, value in EVERY_OPTION.items()}
    plain_logits = model_with()(ids)
    assert all(not torch.allclose(each, plain_logits) for each in logits.values())


CACHED = [{}, *({k: v} for k, v in EVERY_OPTION.items()), EVERY_OPTION, LLAMA, QWEN3, CAPPED, VALUE_EMBEDDED]


@pytest.mark.parametrize("options", [*CACHED, {"value_embeddings": 1}])
def test_cached_prefill_and_decode_give_the_plain_forwards_logits_within_1e_5(options: dict) -> None:
    model = model_with(**options)
    ids = torch.randint(0, SIZES["vocab_size"], (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids)[0]
    cache = KVCache(model, slots=3)
    last, _ = prefill(model, cache, 1, ids[0, :9].tolist())
    assert torch.allclose(last, full[8], atol=1e-5, rtol=0)
    rows = torch.tensor([0, 1, 2])
    for t in range(9, 20):  # slot 1 at position t beside two padding rows
        tokens, positions = torch.tensor([5, int(ids[0, t]), 7]), torch.tensor([-1, t, -1])
        assert torch.allclose(decode(model, cache, rows, tokens, positions)[1], full[t], atol=1e-5, rtol=0), t


def test_a_model_with_options_round_trips_through_its_files_and_a_bad_option_is_refused(tmp_path: Path) -> None:
    model = model_with(**EVERY_OPTION)
    weights.save(model, tmp_path / "model")
    loaded = weights.load(tmp_path / "model")
    ids = torch.tensor([[7, 7, 2, 40]])
    assert loaded.config == model.config and torch.equal(loaded(ids), model(ids))
    config_file = tmp_path / "model" / weights.CONFIG_FILE
    config_file.write_text(json.dumps(model.config.to_dict() | {"position": "alibi"}))
    with pytest.raises(SolomonError, match=r"not a valid model config \(position 'alibi' is not one of learned, rot"):
        weights.load(tmp_path / "model")


def test_params_refuse_an_unknown_option_or_one_the_llama_family_has_not_naming_the_key(tmp_path: Path) -> None:
    cases = (
        ("position: alibi", "position"),
        ("activation: swish", "activation"),
        ("family: llama\n  position: learned", "position"),
        ("family: llama\n  activation: relu2", "activation"),
        ("family: llama\n  bias: true", "bias"),
    )
    for model, key in cases:
        path = tmp_path / "params.yaml"
        path.write_text(f"model:\n  {model}\n")
        with pytest.raises(SolomonError, match=rf"model\.{key}") as caught:
            load_params(path)
        assert "\n" not in str(caught.value)


def test_the_llama_family_is_rmsnorm_with_a_gain_swiglu_and_qwen3s_qk_norm_with_a_gain() -> None:
    model = model_with(**QWEN3)
    block = model.blocks[0]
    assert isinstance(block.ln_1, torch.nn.RMSNorm) and block.ln_1.weight is not None
    assert model.wpe is None and not any(name.endswith(".bias") for name, _ in model.named_parameters())
    x = torch.randn(1, 5, SIZES["n_embd"])
    hidden = block.mlp.fc(x)
    gate, up = hidden.chunk(2, dim=-1)
    assert gate.shape[-1] == 128 and torch.equal(block.mlp(x), block.mlp.proj(torch.nn.functional.silu(gate) * up))
    with torch.no_grad():
        block.attn.q_norm.weight.fill_(2.0)  # the gain scales each head's normalised queries
        q, _, _ = block.attn.heads(x, None)
    assert torch.allclose(q.pow(2).mean(-1), torch.full(q.shape[:-1], 4.0), atol=1e-3)
    default = GPTConfig.from_params(load_params_from({"family": "llama"}), 61)
    assert (default.position, default.activation) == ("rotary", "swiglu")
    assert GPTConfig(**{**SIZES, "n_embd": 384, **LLAMA}).mlp_hidden == 1024  # GELU's 2 × 384 × 1536 parameters


def load_params_from(model: dict):
    from solomon.params import Params

    return Params.model_validate({"model": model}).model


def test_the_gpt2_layout_exports_refuse_a_model_with_options_in_one_line() -> None:
    with pytest.raises(SolomonError) as caught:
        slots(GPTConfig(**SIZES, position="rotary", qk_norm=True))
    message = str(caught.value)
    assert "\n" not in message
    assert "model.position: rotary, model.qk_norm: true" in message and "export --format mlflow" in message
    assert len(slots(GPTConfig(**SIZES))) == 2 + 12 * 2 + 2


def test_a_logit_softcap_bounds_the_logits_and_its_fused_loss_and_gradients_are_autograds() -> None:
    """c·tanh(z / c) keeps every logit inside ±c; the fused loss (its gradient through the cap computed in the forward
    pass) equals autograd's through the plain path, label smoothing on."""
    import torch.nn.functional as F

    from solomon.model.linear_cross_entropy import linear_cross_entropy

    model = model_with(**CAPPED)
    ids = torch.randint(0, SIZES["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(ids)
    assert logits.abs().max() < 2.0 and logits.dtype == torch.float32
    hidden = torch.randn(40, 16, generator=torch.Generator().manual_seed(4), requires_grad=True)
    weight = torch.randn(29, 16, generator=torch.Generator().manual_seed(5), requires_grad=True)
    targets = torch.randint(0, 29, (40,), generator=torch.Generator().manual_seed(6))
    fused = linear_cross_entropy(hidden, weight, targets, 0.1, softcap=3.0)
    fused_grads = torch.autograd.grad(fused, (hidden, weight))
    capped = 3.0 * torch.tanh(hidden @ weight.t() / 3.0)
    plain = F.cross_entropy(capped, targets, label_smoothing=0.1, reduction="sum")
    plain_grads = torch.autograd.grad(plain, (hidden, weight))
    assert torch.allclose(fused, plain, rtol=1e-6, atol=1e-5)
    for got, expected in zip(fused_grads, plain_grads, strict=True):
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_value_embeddings_add_a_token_embedding_to_the_first_blocks_values_and_train_with_adamw() -> None:
    from solomon.params import TrainParams
    from solomon.train.optimizer import build_optimizer, hidden_matrices

    model = model_with(**VALUE_EMBEDDED)
    assert len(model.value_embeds) == 2 and model.value_embedding(2, torch.tensor([[1]])) is None
    fresh = GPT(GPTConfig(**SIZES, **VALUE_EMBEDDED))
    assert all(not table.weight.any() for table in fresh.value_embeds)  # starts as the model without them
    ids = torch.tensor([[3, 9, 4]])
    with torch.no_grad():
        with_them = model(ids)
        for table in model.value_embeds:
            table.weight.zero_()
        assert not torch.allclose(with_them, model(ids))
    in_muon = {id(p) for p in hidden_matrices(model)}
    assert not any(id(table.weight) in in_muon for table in model.value_embeds)
    adamw = build_optimizer(model, TrainParams(), 1e-3, "bf16").adamw
    assert {id(t.weight) for t in model.value_embeds} <= {id(p) for g in adamw.param_groups for p in g["params"]}
    with pytest.raises(ValueError, match=r"value_embeddings \(7\) counts blocks: at most model\.n_layer \(6\)"):
        load_params_from({"value_embeddings": 7})


@pytest.mark.parametrize(
    "options, named",
    [
        (CAPPED, "model.logit_softcap: 2"),
        ({"logit_softcap": 30.0}, "model.logit_softcap: 30"),
        (VALUE_EMBEDDED, "model.value_embeddings: 2"),
        (VALUE_EMBEDDED | {"logit_softcap": 15.0}, "model.value_embeddings: 2, model.logit_softcap: 15"),
    ],
)
def test_no_hugging_face_or_gguf_layout_carries_a_softcap_or_value_embeddings_and_the_export_says_so(
    options: dict, named: str
) -> None:
    with pytest.raises(SolomonError) as caught:
        slots(GPTConfig(**SIZES, **options))
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"the run's model has {named}, which no Hugging Face or GGUF")
    assert "export --format mlflow" in message


GPT2_WITH_OPTIONS = {"family": "gpt2", **EVERY_OPTION}  # model.* params: GPT-2's family with every option on


@pytest.mark.parametrize(
    "model",
    [GPT2_WITH_OPTIONS, {"family": "llama"}, {"family": "llama", "logit_softcap": 15.0, "value_embeddings": 2}],
    ids=["gpt2-options", "qwen3", "qwen3-softcap-value-embeddings"],
)
def test_a_run_with_options_or_of_the_llama_family_killed_between_checkpoints_resumes_to_the_same_bytes(
    built_repo: Path, tmp_path: Path, model: dict
) -> None:
    options = {"model": model}
    reference = workdir(built_repo, tmp_path / "reference", options)
    assert (done := run_train(built_repo, reference)).returncode == 0, done.stderr
    config = json.loads((reference / "models" / weights.CONFIG_FILE).read_text())
    built = GPTConfig(**config)  # config.json leaves out what is GPT-2's (family gpt2)
    assert {name: getattr(built, name) for name in model} == model and built.qk_norm
    for option in ("logit_softcap", "value_embeddings"):
        assert (option in config) is (option in model)  # written only when on

    cwd = workdir(built_repo, tmp_path / "killed", options)
    killed = run_train(built_repo, cwd, crash_at="after-step:25")  # 5 steps past the checkpoint of step 20
    assert killed.returncode == -signal.SIGKILL and logged_steps(cwd) == 25
    finished = run_train(built_repo, cwd)
    assert finished.returncode == 0, finished.stderr
    assert "(step 20)" in finished.stderr
    assert outcome(cwd) == outcome(reference)
