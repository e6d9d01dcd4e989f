"""The optimiser ``train.optimizer`` names: AdamW on every parameter, or Muon on the transformer blocks' hidden weight
matrices with AdamW on the rest (the token embedding the head shares, position embeddings, norm gains, biases).

Either way it is one object with ``param_groups``, ``zero_grad``, ``step``, ``state_dict`` and ``load_state_dict``,
so the step (which sets every group's learning rate from the schedule), the schedule and the checkpointer do not
know which. Muon scales its updates with ``adjust_lr_fn="match_rms_adamw"`` (RMS 0.2, Moonshot's rule) so that the
learning rate and weight decay tuned for AdamW apply to both parts unchanged. In a bf16 run the Muon is
torch.optim.Muon: solomon/train/muon.py's BatchedMuon (the same update and state, one Newton-Schulz product per matrix
shape) was slower per optimiser step at the default shape (docs/training.md; lab/bench/muon.py times both). In an
fp32 run it is BatchedMuon in fp32: torch's always orthogonalises in bf16.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

from solomon.model.gpt import GPT
from solomon.params import TrainParams
from solomon.train.muon import BatchedMuon
from solomon.train.precision import Precision, newton_schulz_dtype


class Optimizer(Protocol):
    """What the step and the checkpointer use of an optimiser (``torch.optim.AdamW`` is one as it is)."""

    param_groups: list[dict[str, Any]]

    def zero_grad(self, set_to_none: bool = True) -> None: ...
    def step(self) -> Any: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def adamw(parameters: Iterable[torch.nn.Parameter], cfg: TrainParams, lr: float) -> torch.optim.AdamW:
    """AdamW that decays weight matrices and embeddings, not biases or norm gains."""
    trainable = [p for p in parameters if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one elementwise kernel per tensor instead of a dozen passes (deterministic, as every CPU kernel here)
    return torch.optim.AdamW(groups, lr=lr, betas=(cfg.beta1, cfg.beta2), fused=True)


def hidden_matrices(model: GPT) -> list[torch.nn.Parameter]:
    """The 2-D weights inside the transformer blocks (attention qkv and projection, MLP up and down): what Muon is
    for. Embeddings and the head (tied to the token embedding) are lookups and a classifier, not hidden layers."""
    return [p for p in model.blocks.parameters() if p.requires_grad and p.dim() == 2]


class MuonWithAdamW:
    """Muon on the hidden matrices and AdamW on the rest, stepped together as one optimiser.

    ``param_groups`` is Muon's groups then AdamW's (the same dicts, so setting a group's lr sets it in the optimiser
    that owns it); the state is both optimisers' states under their names, so it goes through the checkpoint.
    ``muon_class`` is for ``lab.bench.muon``, which times BatchedMuon (the same arguments and state)
    against torch's.
    """

    def __init__(
        self,
        model: GPT,
        cfg: TrainParams,
        lr: float,
        muon_class: Callable[..., torch.optim.Optimizer] = torch.optim.Muon,
    ) -> None:
        hidden = hidden_matrices(model)
        hidden_ids = {id(p) for p in hidden}
        self.muon = muon_class(
            hidden,
            lr=lr,
            weight_decay=cfg.weight_decay,
            momentum=cfg.muon.momentum,
            nesterov=cfg.muon.nesterov,
            ns_steps=cfg.muon.ns_steps,
            adjust_lr_fn="match_rms_adamw",
        )
        self.adamw = adamw((p for p in model.parameters() if id(p) not in hidden_ids), cfg, lr)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])


def build_optimizer(model: GPT, cfg: TrainParams, lr: float, precision: Precision) -> Optimizer:
    """The optimiser of ``cfg.optimizer`` for ``model``, every group at learning rate ``lr``. Muon orthogonalises in
    the run's resolved ``precision`` (``solomon.train.precision``): torch's Muon in bf16, BatchedMuon in fp32 (torch's
    casts to bf16 whatever the run's precision, and a CPU without native bf16 matmuls runs that many times slower)."""
    if cfg.optimizer == "muon" and precision == "fp32":
        return MuonWithAdamW(model, cfg, lr, functools.partial(BatchedMuon, ns_dtype=newton_schulz_dtype(precision)))
    if cfg.optimizer == "muon":
        return MuonWithAdamW(model, cfg, lr)
    return adamw(model.parameters(), cfg, lr)
