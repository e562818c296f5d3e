"""Choosing the next token: greedy, temperature, top-k and top-p (nucleus) sampling (beam search: :mod:`decoding.beam`).

* Temperature: ``softmax(logits / T)``; ``T → 0`` is greedy.
* Top-k (Fan et al. 2018): keep the k most probable tokens (ties broken by the lower id), renormalise.
* Top-p / nucleus (Holtzman et al. 2020): keep the smallest set of most probable tokens whose total
  probability reaches p, renormalise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decoding.batched import greedy_batch, translate_texts
from model.tokenizer import TextTokenizer
from model.transformer import Transformer


class SamplingError(ValueError):
    """A sampling parameter outside its valid range (the message says which and why)."""


@dataclass
class SamplingConfig:
    """How to pick the next token.

    Attributes:
        strategy: ``"greedy"`` or ``"sample"`` (beam search is :func:`beam_search`).
        temperature: > 0; values below ``1e-4`` are treated as greedy.
        top_k: keep the k most probable tokens (0 = no cut).
        top_p: keep the nucleus of probability mass p, in (0, 1] (1 = no cut).
        seed: seed of the sampling generator, so a run replays exactly.
    """

    strategy: str = "greedy"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def validate(self, vocab_size: int | None = None) -> "SamplingConfig":
        """Raise :class:`SamplingError` for an invalid value; ``top_k`` larger than the vocabulary is clamped."""
        if self.strategy not in ("greedy", "sample"):
            raise SamplingError(f"strategy must be 'greedy' or 'sample', got {self.strategy!r}")
        if not self.temperature > 0:
            raise SamplingError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise SamplingError(f"top-k must be ≥ 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise SamplingError(f"top-p must lie in (0, 1], got {self.top_p}")
        if vocab_size is not None and self.top_k > vocab_size:
            self.top_k = vocab_size
        return self


@dataclass(frozen=True, eq=False)  # tensors inside: compared and hashed by identity
class Pipeline:
    """Every stage of one next-token choice, ``[vocab]`` tensors (for the decoding lab's pipeline view)."""

    logits: torch.Tensor
    scaled: torch.Tensor  # logits / temperature
    probs: torch.Tensor  # softmax(scaled)
    keep: torch.Tensor  # bool: survived the top-k / top-p cut
    final: torch.Tensor  # renormalised distribution over kept tokens
    token_id: int

    def slim(self, also: tuple[int, ...] = ()) -> "SlimPipeline":
        """What the pages draw of this choice, without the ``[vocab]`` rows: the :data:`SLIM_KEPT` tokens of
        highest score, the chosen one and ``also`` (a shared decoding keeps this, not five vocabulary-wide rows a
        step: 1 MB a step for a 58k vocabulary)."""
        top = torch.topk(self.logits, min(SLIM_KEPT, self.logits.numel())).indices.tolist()
        ids = torch.tensor(list(dict.fromkeys([*top, int(self.token_id), *(int(i) for i in also)])))
        return SlimPipeline(
            self.logits.numel(),
            ids,
            self.logits[ids],
            self.scaled[ids],
            self.probs[ids],
            self.keep[ids],
            self.final[ids],
            int(self.token_id),
        )

    def dense(self) -> "Pipeline":
        """This pipeline (a :class:`SlimPipeline` rebuilds its rows)."""
        return self

    def final_prob(self, token_id: int) -> float:
        """The probability of ``token_id`` after the rule's reshaping."""
        return float(self.final[token_id])


#: Tokens of highest score a :class:`SlimPipeline` keeps (the lab's pipeline view draws 15, plus the chosen one).
SLIM_KEPT = 16


@dataclass(frozen=True, eq=False)
class SlimPipeline:
    """A :class:`Pipeline` kept for a few tokens only (:meth:`Pipeline.slim`): ``ids`` ``[n]`` and each stage's
    values for them ``[n]``. Its ``logits``, ``scaled``, ``probs``, ``keep`` and ``final`` read as ``[vocab]``
    rows rebuilt on each access: the kept values in place, −∞ scores, 0 probabilities and ``False`` elsewhere
    (a token that was not kept reads as one the rule removed)."""

    vocab_size: int
    ids: torch.Tensor
    kept_logits: torch.Tensor
    kept_scaled: torch.Tensor
    kept_probs: torch.Tensor
    kept_keep: torch.Tensor
    kept_final: torch.Tensor
    token_id: int

    def _row(self, values: torch.Tensor, fill) -> torch.Tensor:
        row = torch.full((self.vocab_size,), fill, dtype=values.dtype)
        row[self.ids] = values
        return row

    logits = property(lambda self: self._row(self.kept_logits, float("-inf")))
    scaled = property(lambda self: self._row(self.kept_scaled, float("-inf")))
    probs = property(lambda self: self._row(self.kept_probs, 0.0))
    keep = property(lambda self: self._row(self.kept_keep, False))
    final = property(lambda self: self._row(self.kept_final, 0.0))

    def slim(self, also: tuple[int, ...] = ()) -> "SlimPipeline":
        return self

    def dense(self) -> Pipeline:
        """A :class:`Pipeline` with the rebuilt ``[vocab]`` rows."""
        return Pipeline(self.logits, self.scaled, self.probs, self.keep, self.final, self.token_id)

    def final_prob(self, token_id: int) -> float:
        """The probability of ``token_id`` after the rule's reshaping (0 for a token that was not kept)."""
        hit = (self.ids == int(token_id)).nonzero()
        return float(self.kept_final[hit[0, 0]]) if hit.numel() else 0.0


def top_k_mask(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Bool ``[vocab]``: exactly ``min(k, vocab)`` most probable tokens; ties go to the lower id. ``k=0`` keeps all."""
    if k <= 0 or k >= probs.numel():
        return torch.ones_like(probs, dtype=torch.bool)
    # Stable sort on descending probability keeps the lower id first among equals.
    order = torch.sort(probs, descending=True, stable=True).indices
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order[:k]] = True
    return keep


def top_p_mask(probs: torch.Tensor, p: float) -> torch.Tensor:
    """Bool ``[vocab]``: the smallest prefix of tokens (by descending probability) whose mass reaches ``p``."""
    if p >= 1.0:
        return torch.ones_like(probs, dtype=torch.bool)
    sorted_p, order = torch.sort(probs, descending=True, stable=True)
    cum = torch.cumsum(sorted_p, dim=0)
    # Number kept = first index where the cumulative mass reaches p, plus one.
    n_keep = int(torch.searchsorted(cum, torch.tensor(p, dtype=cum.dtype)).item()) + 1
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order[: min(n_keep, probs.numel())]] = True
    return keep


def choose_next(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None = None) -> Pipeline:
    """Run the whole pipeline on ``logits [vocab]``: temperature → softmax → top-k ∩ top-p → renormalise → pick."""
    logits = logits.float()
    greedy = cfg.strategy == "greedy" or cfg.temperature < 1e-4
    scaled = logits / (1.0 if greedy else cfg.temperature)
    probs = torch.softmax(scaled, dim=-1)
    if greedy:
        keep = torch.zeros_like(probs, dtype=torch.bool)
        keep[int(torch.argmax(logits))] = True
    else:
        keep = top_k_mask(probs, cfg.top_k) & top_p_mask(probs, cfg.top_p)
    final = torch.where(keep, probs, torch.zeros_like(probs))
    final = final / final.sum()
    token = int(torch.argmax(final)) if greedy else int(torch.multinomial(final, 1, generator=generator))
    return Pipeline(logits, scaled, probs, keep, final, token)


class Chooser:
    """A callable ``log_probs [vocab] → token id`` for :class:`~decoding.stepping.Stepper`, seeded for replay."""

    def __init__(self, cfg: SamplingConfig):
        self.cfg = cfg
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.last: Pipeline | None = None

    def __call__(self, log_probs: torch.Tensor) -> int:
        self.last = choose_next(log_probs, self.cfg, self.generator)
        return self.last.token_id


def sample_batch(top_k: int = 10, temperature: float = 1.0, generator: torch.Generator | None = None):
    """A ``pick(logits [batch, vocab]) -> ids [batch]`` for :func:`~decoding.batched.greedy_batch` that samples each
    row from ``softmax(logits / temperature)`` cut to its ``top_k`` most probable tokens and renormalised (Fan et
    al. 2018; ``top_k`` 0 keeps all: unrestricted sampling). Ties at the cut go as ``torch.topk`` orders them.

    Raises:
        SamplingError: ``temperature`` ≤ 0 or ``top_k`` < 0.
    """
    if temperature <= 0 or top_k < 0:
        raise SamplingError(f"sampling needs a temperature above 0 and top-k ≥ 0, got {temperature} and {top_k}")

    def pick(logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        if 0 < top_k < probs.shape[-1]:
            kept, ids = probs.topk(top_k, dim=-1)
            drawn = torch.multinomial(kept / kept.sum(-1, keepdim=True), 1, generator=generator)
            return ids.gather(-1, drawn).squeeze(-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    return pick


def sampled_translate_texts(
    model: Transformer,
    tokenizer: TextTokenizer,
    texts: list[str],
    top_k: int = 10,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 64,
) -> list[str]:
    """A sampled translation of each text (:func:`sample_batch` in :func:`~decoding.batched.greedy_batch`), one seeded
    random stream for the whole call (the same texts, order and batch size give the same outputs); as
    :func:`~decoding.batched.translate_texts` otherwise: order kept, an unusable text gives an empty string.

    Raises:
        SamplingError: as :func:`sample_batch`.
    """
    pick = sample_batch(top_k, temperature, torch.Generator(device=model.device).manual_seed(seed))

    def decode(m: Transformer, src_batch: list[list[int]]) -> list[list[int]]:
        return greedy_batch(m, src_batch, pick=pick)

    return translate_texts(model, tokenizer, texts, batch_size, decode_batch=decode)
