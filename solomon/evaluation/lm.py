"""lm-eval's model interface (``TemplateLM``) over a ``GPT`` and its tokenizer: the run's own model, in fp32 as the
evaluate stage scores it.

Every scored sequence is at most ``block_size`` tokens (context and continuation, the context cut from the left),
and a rolling document is cut into windows of ``block_size - 1`` predicted tokens after one of context: the
sequences lm-eval's ``local-completions`` sends a server with ``max_length = block_size + 1`` and its ``hf`` model
feeds the Hugging Face export with ``max_length = block_size - 1``, so the three see the same tokens. Each scored
sequence is kept (``scored``), for the replay sample a run records.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tokenizers import Tokenizer

from solomon.model.gpt import GPT


@dataclass
class Scored:
    """One scored sequence: ``tokens`` (context then continuation), how many are context, and what the continuation
    earned: its summed log-probability (nats) and whether each of its tokens was the most likely."""

    task: str
    tokens: list[int]
    context: int
    loglikelihood: float
    greedy: bool
    cut: bool = False  # the continuation did not fit the window: its first tokens were not scored


class SolomonLM(TemplateLM):
    def __init__(self, model: GPT, tokenizer: Tokenizer, eod_id: int, batch_size: int) -> None:
        super().__init__()
        self.model, self.tokenizer, self.eod_id, self.batch_size = model.eval(), tokenizer, eod_id, batch_size
        self.max_length = model.config.block_size
        self.scored: list[Scored] = []

    @property
    def eot_token_id(self) -> int:
        return self.eod_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tokenizer.encode(string).ids

    def tok_decode(self, tokens: list[int], **kwargs) -> str:
        return self.tokenizer.decode(tokens)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        self.tasks = [request.task_name for request in requests]  # lm-eval encodes them in this order
        return super().loglikelihood(requests, disable_tqdm)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        pairs = [(list(context), list(continuation)) for _, context, continuation in requests]
        return [(s.loglikelihood, s.greedy) for s in self.score(pairs, self.tasks)]

    @torch.no_grad()
    def score(self, pairs: list[tuple[list[int], list[int]]], tasks: list[str]) -> list[Scored]:
        """Each (context, continuation) of task ``tasks[i]`` cut to the last ``max_length`` tokens and scored, in
        batches of the longest first (right-padded: a causal model's earlier positions do not see the padding)."""
        sequences = [(context + continuation)[-self.max_length :] for context, continuation in pairs]
        results: list[Scored | None] = [None] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: (-len(sequences[i]), i))
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = max(len(sequences[i]) - 1 for i in batch)
            inputs = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                inputs[row, : len(sequences[i]) - 1] = torch.tensor(sequences[i][:-1])
            logprobs = torch.log_softmax(self.model(inputs).float(), dim=-1)
            for row, i in enumerate(batch):
                # a continuation longer than the window keeps its last tokens, after one of context at least
                sequence = sequences[i]
                n = min(len(pairs[i][1]), len(sequence) - 1)
                rows = logprobs[row, len(sequence) - 1 - n : len(sequence) - 1]
                targets = torch.tensor(sequence[-n:])
                earned = rows.gather(1, targets[:, None])[:, 0]
                greedy = bool((rows.argmax(dim=-1) == targets).all())
                cut = n < len(pairs[i][1])
                results[i] = Scored(tasks[i], sequence, len(sequence) - n, float(earned.sum()), greedy, cut)
        self.scored += results
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each document in disjoint windows, the windows of all documents scored in batches together."""
        windows, tasks, owner = [], [], []
        for index, request in enumerate(requests):
            (text,) = request.args
            for window in get_rolling_token_windows(
                self.tok_encode(text), self.prefix_token_id, self.max_length - 1, context_len=1
            ):
                windows.append(make_disjoint_window(window))
                tasks.append(request.task_name)
                owner.append(index)
        totals = [0.0] * len(requests)
        for index, scored in zip(owner, self.score(windows, tasks), strict=True):
            totals[index] += scored.loglikelihood
        return totals

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, cut at the first of the request's ``until`` strings."""
        answers = []
        for context, gen_kwargs in [request.args for request in requests]:
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            ids, new = self.tok_encode(context), []
            for _ in range(int(gen_kwargs.get("max_gen_toks", 256))):
                window = torch.tensor([(ids + new)[-self.max_length :]])
                token = int(self.model(window)[0, -1].argmax())
                if token == self.eod_id:
                    break
                new.append(token)
                text = self.tok_decode(new)
                if any(stop in text for stop in until):
                    break
            text = self.tok_decode(new)
            cut = min((text.find(stop) for stop in until if stop in text), default=len(text))
            answers.append(text[:cut])
        return answers
