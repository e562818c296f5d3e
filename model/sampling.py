"""Choosing the next token: greedy, temperature, top-k, top-p (nucleus) sampling, and beam search.

* Temperature: ``softmax(logits / T)``; ``T → 0`` is greedy.
* Top-k (Fan et al. 2018): keep the k most probable tokens (ties broken by the lower id), renormalise.
* Top-p / nucleus (Holtzman et al. 2020): keep the smallest set of most probable tokens whose total
  probability reaches p, renormalise.
* Beam search with the GNMT length penalty (Wu et al. 2016, eq. 14): ``score = log P(Y) / lp(Y)``,
  ``lp(Y) = ((5 + |Y|) / 6)^α``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .decoding import decoder_prefix
from .transformer import Transformer


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


@dataclass
class Pipeline:
    """Every stage of one next-token choice, ``[vocab]`` tensors (for the decoding lab's pipeline view)."""

    logits: torch.Tensor
    scaled: torch.Tensor  # logits / temperature
    probs: torch.Tensor  # softmax(scaled)
    keep: torch.Tensor  # bool: survived the top-k / top-p cut
    final: torch.Tensor  # renormalised distribution over kept tokens
    token_id: int


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
    """A callable ``log_probs [vocab] → token id`` for :class:`~model.decoding.Stepper`, seeded for replay."""

    def __init__(self, cfg: SamplingConfig):
        self.cfg = cfg
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.last: Pipeline | None = None

    def __call__(self, log_probs: torch.Tensor) -> int:
        self.last = choose_next(log_probs, self.cfg, self.generator)
        return self.last.token_id


# --- beam search ----------------------------------------------------------------------------------
def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``((5 + length) / 6)^α`` (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Hypothesis:
    """A finished or pruned beam: generated ``tokens`` (``<eos>`` included when finished) and its scores."""

    tokens: list[int]
    log_prob: float
    score: float
    finished: bool


@dataclass
class BeamResult:
    """Beam search output: ``hypotheses`` sorted by score (best first) and the per-step tree for display.

    ``steps[t]`` lists ``(parent_index, token_id, cumulative_log_prob, kept)`` for every candidate considered
    at step ``t``; ``kept`` is False for pruned ones.
    """

    hypotheses: list[Hypothesis]
    steps: list[list[tuple[int, int, float, bool]]] = field(default_factory=list)


@torch.inference_mode()
def beam_search(model: Transformer, src_ids: list[int] | None, beam_size: int = 4, alpha: float = 0.6,
                max_new_tokens: int | None = None, prefix_ids: list[int] | None = None) -> BeamResult:
    """Beam search with the KV cache (the cache rows follow their beams via ``KVCache.select``).

    ``src_ids`` and ``prefix_ids`` as in :class:`~model.decoding.Stepper` (a decoder-only model continues the
    prompt ``src_ids``).

    Raises:
        SamplingError: ``beam_size`` outside 1–16.
    """
    if not 1 <= beam_size <= 16:
        raise SamplingError(f"beam size must be between 1 and 16, got {beam_size}")
    cfg = model.cfg
    dev = model.device
    prefix = decoder_prefix(cfg, src_ids, prefix_ids)
    limit = min(max_new_tokens or cfg.max_len, cfg.max_len - len(prefix))
    memory = memory_mask = None
    if cfg.is_encoder_decoder:
        src = torch.tensor([src_ids], device=dev)
        memory, _ = model.encode(src)
        memory_mask = model.src_mask(src)
    cache = model.new_cache()
    beams: list[list[int]] = [[]]
    beam_lp = torch.zeros(1, device=dev)
    feed = torch.tensor([prefix], device=dev)
    finished: list[Hypothesis] = []
    steps = []
    for t in range(limit):
        n = len(beams)
        out = model.decode(feed, None if t else memory.expand(n, -1, -1) if memory is not None else None,
                           None if t or memory_mask is None else memory_mask.expand(n, -1, -1, -1), cache=cache)
        log_probs = torch.log_softmax(model.logits(out.hidden[:, -1]).float(), dim=-1)  # [n, vocab]
        total = (beam_lp[:, None] + log_probs).reshape(-1)
        k = min(2 * beam_size, total.numel())
        top_lp, top_idx = torch.topk(total, k)
        vocab = log_probs.size(-1)
        step_rec, new_beams, new_lp, parents = [], [], [], []
        for lp, idx in zip(top_lp.tolist(), top_idx.tolist()):
            parent, token = divmod(idx, vocab)
            seq = beams[parent] + [token]
            kept = False
            if token == cfg.eos_id:
                if len(finished) < beam_size:
                    finished.append(Hypothesis(seq, lp, lp / length_penalty(len(seq), alpha), True))
                    kept = True
            elif len(new_beams) < beam_size:
                new_beams.append(seq)
                new_lp.append(lp)
                parents.append(parent)
                kept = True
            step_rec.append((parent, token, lp, kept))
        steps.append(step_rec)
        best_open = max(new_lp) / length_penalty(limit, alpha) if new_lp and alpha > 0 else (max(new_lp) if new_lp else None)
        best_done = max((h.score for h in finished), default=None)
        if not new_beams or (len(finished) >= beam_size and best_done is not None and best_open is not None
                             and best_done >= best_open):
            break
        cache.select(torch.tensor(parents, device=dev))
        beams, beam_lp = new_beams, torch.tensor(new_lp, device=dev)
        feed = torch.tensor([[s[-1]] for s in beams], device=dev)
    for seq, lp in zip(beams, beam_lp.tolist()):
        if len(finished) >= beam_size:
            break
        finished.append(Hypothesis(seq, lp, lp / length_penalty(len(seq), alpha), False))
    finished.sort(key=lambda h: h.score, reverse=True)
    return BeamResult(finished, steps)


@dataclass
class BeamState:
    """Beam search after ``step`` steps (step 0 = only ``<bos>``), rebuilt from a :class:`BeamResult`.

    Attributes:
        step: steps taken.
        open: the open beams after this step, in the search's order (``finished`` False; ``score`` =
            ``log_prob / lp(len)``).
        finished: hypotheses closed with ``<eos>`` so far, in closing order.
        candidates: what this step considered, best first: ``(parent_tokens, token_id, cumulative_log_prob,
            kept)``; empty at step 0.
    """

    step: int
    open: list[Hypothesis]
    finished: list[Hypothesis]
    candidates: list[tuple[list[int], int, float, bool]]

    def best(self) -> Hypothesis | None:
        """The highest-scoring hypothesis, open or finished, at this point of the search."""
        return max(self.open + self.finished, key=lambda h: h.score, default=None)


def beam_states(result: BeamResult, alpha: float, eos_id: int) -> list[BeamState]:
    """Every intermediate state of a finished search: ``states[t]`` after ``t`` steps, ``t = 0 … len(steps)``.

    Beam search is deterministic, so stepping through it is replaying ``result.steps``: the open beams of step
    ``t`` are the kept non-``<eos>`` candidates of step ``t`` (in order), exactly as :func:`beam_search` builds
    them; a kept ``<eos>`` candidate closes a hypothesis.
    """
    states = [BeamState(0, [Hypothesis([], 0.0, 0.0, False)], [], [])]
    for t, cands in enumerate(result.steps, start=1):
        prev = states[-1]
        open_, finished, considered = [], list(prev.finished), []
        for parent, token, lp, kept in cands:
            base = prev.open[parent].tokens if parent < len(prev.open) else []
            considered.append((list(base), int(token), float(lp), bool(kept)))
            if not kept:
                continue
            seq = base + [int(token)]
            hyp = Hypothesis(seq, float(lp), float(lp) / length_penalty(len(seq), alpha), int(token) == eos_id)
            (finished if hyp.finished else open_).append(hyp)
        states.append(BeamState(t, open_, finished, considered))
    return states
