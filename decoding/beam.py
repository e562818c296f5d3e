"""Beam search with the GNMT length penalty (Wu et al. 2016, eq. 14): ``score = log P(Y) / lp(Y)``,
``lp(Y) = ((5 + |Y|) / 6)^α`` (Vaswani et al. 2017, §6.1: beam 4, α = 0.6).

One sentence step by step for the Decoding lab (:func:`beam_search`, which keeps the candidate tree), or a batch
of sentences at once for evaluation (:func:`beam_search_batch`, :func:`beam_translate_texts`); both run the same
search (:func:`_beam_search_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decoding.batched import encode_batch, source_limits, translate_texts
from decoding.loops import ban_loops
from decoding.sampling import SamplingError
from decoding.stepping import strip_eos
from model.config import decoder_prefix
from model.tokenizing import Tokenizer
from model.transformer import Transformer


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``((5 + length) / 6)^α`` (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass(frozen=True)
class Hypothesis:
    """A finished or pruned beam: generated ``tokens`` (``<eos>`` included when finished) and its scores."""

    tokens: tuple[int, ...]
    log_prob: float
    score: float
    finished: bool


@dataclass(frozen=True)
class BeamResult:
    """Beam search output, frozen (the Decoding lab shares one search with every visitor): ``hypotheses`` sorted by
    score (best first) and the per-step tree for display.

    ``steps[t]`` lists ``(parent_index, token_id, cumulative_log_prob, kept)`` for every candidate considered
    at step ``t``; ``kept`` is False for pruned ones.
    """

    hypotheses: tuple[Hypothesis, ...]
    steps: tuple[tuple[tuple[int, int, float, bool], ...], ...] = ()


def hypothesis_score(log_prob: float, length: int, alpha: float) -> float:
    """A hypothesis' beam score ``log P(Y) / lp(|Y|)`` (Wu et al. 2016, eq. 14 without the coverage penalty);
    ``|Y|`` counts the generated tokens, a final ``<eos>`` included."""
    return log_prob / length_penalty(length, alpha)


def check_beam_size(beam_size: int) -> None:
    """Raise :class:`SamplingError` unless ``1 ≤ beam_size ≤ 16``."""
    if not 1 <= beam_size <= 16:
        raise SamplingError(f"beam size must be between 1 and 16, got {beam_size}")


def _finish(
    hypotheses: list[Hypothesis], beams: list[list[int]], beam_lp: list[float], beam_size: int, alpha: float
) -> None:
    """Close a sentence's search: the open ``beams`` fill the free places (unfinished), then rank by score."""
    for seq, lp in zip(beams, beam_lp, strict=True):
        if len(hypotheses) >= beam_size:
            break
        hypotheses.append(Hypothesis(tuple(seq), lp, hypothesis_score(lp, len(seq), alpha), False))
    hypotheses.sort(key=lambda h: h.score, reverse=True)


def _beam_search_rows(
    model: Transformer,
    feed: torch.Tensor,
    memory: torch.Tensor | None,
    memory_mask: torch.Tensor | None,
    limits: list[int],
    beam_size: int,
    alpha: float,
    record: bool,
    loop_times: int = 0,
) -> list[BeamResult]:
    """Beam search of ``B`` sequences at once with the KV cache; the one implementation behind :func:`beam_search`
    (``B = 1``) and :func:`beam_search_batch`.

    Args:
        feed: the decoder prefix of every sequence ``[B, prefix_len]`` (``<bos>``, or a decoder-only prompt).
        memory: encoder output ``[B, src_len, d_model]``, or ``None`` for a decoder-only model.
        memory_mask: ``[B, 1, 1, src_len]``, False on source padding (or ``None``).
        limits: the most tokens each sequence may generate.
        record: keep the candidate tree of every step in ``BeamResult.steps`` (the Decoding lab draws it).
        loop_times: 0, or the loop guard: before the ranking, every beam's tokens that would write a phrase this
            many times in a row (:func:`~decoding.loops.loop_completions`) get log-probability −∞.

    Each step decodes one token for all ``rows = open sentences × k`` beams (``k`` = ``beam_size``; one row per
    sentence at the first step) and takes, per sentence, the ``2k`` best continuations of
    ``log P(prefix) + log p(token | prefix)`` over its ``k × vocab`` candidates, in order: a non-``<eos>`` one
    becomes one of the next ``k`` open beams; an ``<eos>`` one closes a hypothesis if it ranks among the first
    ``k`` (so ``k = 1`` is exactly greedy) and fewer than ``k`` are closed. A sentence is done when ``k``
    hypotheses are closed (no later one can enter the ranking; fairseq's rule), or at its limit, where its open
    beams fill the free places. The ranking is by :func:`hypothesis_score`.

    The cache (self-attention rows, and the cross-attention K/V computed once per source at the first step) and
    ``memory_mask`` follow the chosen parents with one ``index_select`` over rows per step, which also expands
    each source to its ``k`` beams and drops the finished sentences from the batch.
    """
    cfg = model.cfg
    dev = model.device
    hyps: list[list[Hypothesis]] = [[] for _ in range(feed.size(0))]  # closed hypotheses per sentence
    # the candidates of every step, per sentence (when recorded)
    trees: list[list[list[tuple[int, int, float, bool]]]] = [[] for _ in hyps]

    def results() -> list[BeamResult]:
        return [BeamResult(tuple(h), tuple(tuple(s) for s in t)) for h, t in zip(hyps, trees, strict=True)]

    beams: list[list[list[int]]] = [[[]] for _ in hyps]  # open beams per sentence (generated tokens)
    for i, limit in enumerate(limits):
        if limit <= 0:
            _finish(hyps[i], [[]], [0.0], beam_size, alpha)
    active = [i for i, limit in enumerate(limits) if limit > 0]
    if not active:
        return results()
    rows = torch.tensor(active, device=dev)
    feed = feed.index_select(0, rows)
    if memory is not None:
        memory = memory.index_select(0, rows)
    if memory_mask is not None:
        memory_mask = memory_mask.index_select(0, rows)
    row_lp = torch.zeros(len(active), device=dev)  # log P of each row's beam
    width = 1  # rows per open sentence
    cache = model.new_cache()
    for t in range(max(limits)):
        out = model.decode(feed, memory if t == 0 else None, memory_mask, cache=cache)
        log_probs = torch.log_softmax(model.next_token_logits(out.hidden[:, -1]).float(), dim=-1)  # [rows, vocab]
        if loop_times:
            ban_loops(log_probs, [seq for i in active for seq in beams[i] + [[]] * (width - len(beams[i]))], loop_times)
        vocab = log_probs.size(-1)
        total = (row_lp[:, None] + log_probs).reshape(len(active), width * vocab)
        top_lp, top_idx = torch.topk(total, min(2 * beam_size, width * vocab), dim=-1)  # [sentences, 2k]
        still, parent_rows, next_lp, next_tokens = [], [], [], []
        for j, (i, cand_lp, cand_idx) in enumerate(zip(active, top_lp.tolist(), top_idx.tolist(), strict=True)):
            closed = hyps[i]
            step_rec: list[tuple[int, int, float, bool]] = []
            new_beams: list[list[int]] = []
            new_lp: list[float] = []
            parents: list[int] = []
            for rank, (lp, idx) in enumerate(zip(cand_lp, cand_idx, strict=True)):
                if lp == float("-inf"):  # a padding row's candidates come last
                    break
                parent, token = divmod(idx, vocab)
                seq = beams[i][parent] + [token]
                kept = False
                if token == cfg.eos_id:
                    if rank < beam_size and len(closed) < beam_size:
                        closed.append(Hypothesis(tuple(seq), lp, hypothesis_score(lp, len(seq), alpha), True))
                        kept = True
                elif len(new_beams) < beam_size:
                    new_beams.append(seq)
                    new_lp.append(lp)
                    parents.append(parent)
                    kept = True
                step_rec.append((parent, token, lp, kept))
            if record:
                trees[i].append(step_rec)
            beams[i] = new_beams
            if not new_beams or len(closed) >= beam_size or t + 1 >= limits[i]:
                _finish(closed, new_beams, new_lp, beam_size, alpha)
                continue
            pad = beam_size - len(new_beams)  # only with a vocabulary smaller than 2k: rows that never win
            still.append(i)
            parent_rows += [j * width + p for p in parents + [parents[0]] * pad]
            next_lp += new_lp + [float("-inf")] * pad
            next_tokens += [seq[-1] for seq in new_beams + [new_beams[0]] * pad]
        if not still:
            break
        index = torch.tensor(parent_rows, device=dev)
        cache.select(index)
        if memory_mask is not None:
            memory_mask = memory_mask.index_select(0, index)
        active, width = still, beam_size
        row_lp = torch.tensor(next_lp, device=dev)
        feed = torch.tensor(next_tokens, device=dev)[:, None]
    return results()


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src_ids: list[int] | None,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_new_tokens: int | None = None,
    prefix_ids: list[int] | None = None,
    loop_times: int = 0,
) -> BeamResult:
    """Beam search of one sequence with the KV cache (the cache rows follow their beams via ``KVCache.select``);
    the rules are :func:`_beam_search_rows`'.

    ``src_ids`` and ``prefix_ids`` as in :class:`~decoding.stepping.Stepper` (a decoder-only model continues the
    prompt ``src_ids``). The length cap is ``max_new_tokens`` (default ``max_len``) within ``max_len``.

    Raises:
        SamplingError: ``beam_size`` outside 1–16.
    """
    check_beam_size(beam_size)
    cfg = model.cfg
    dev = model.device
    prefix = decoder_prefix(cfg, src_ids, prefix_ids)
    limit = min(max_new_tokens or cfg.max_len, cfg.max_len - len(prefix))
    memory = memory_mask = None
    if cfg.is_encoder_decoder:
        src = torch.tensor([src_ids], device=dev)
        memory, _ = model.encode(src)
        memory_mask = model.src_mask(src)
    feed = torch.tensor([prefix], device=dev)
    return _beam_search_rows(model, feed, memory, memory_mask, [limit], beam_size, alpha, True, loop_times)[0]


@torch.inference_mode()
def beam_search_batch(
    model: Transformer,
    src_batch: list[list[int]],
    beam_size: int = 4,
    alpha: float = 0.6,
    max_new_tokens: int | None = None,
    loop_times: int = 0,
) -> list[BeamResult]:
    """Beam search of many sources at once (a translator; for evaluation), batch × beam rows per decoder step.

    Gives, sentence by sentence, what :func:`beam_search` gives with ``max_new_tokens`` =
    :func:`~decoding.batched.source_limits` of that sentence (tested), without the step tree.

    Args:
        src_batch: encoder ids per sentence (``<eos>`` included), any lengths; encoded together, padded.
        beam_size: ``k``, 1–16 (1 = greedy). Vaswani et al. 2017, §6.1, use 4 with ``alpha`` 0.6.
        alpha: the GNMT length penalty's exponent (Wu et al. 2016, eq. 14); 0 = raw log-probability.
        max_new_tokens: length cap; default per sentence, 2 × its source + 10 (as greedy).
        loop_times: 0, or ban every token that would write a phrase this many times in a row
            (:func:`~decoding.loops.loop_completions`, as :func:`_beam_search_rows`).

    Returns:
        One :class:`BeamResult` per sentence, ``hypotheses`` best first.

    Raises:
        SamplingError: ``beam_size`` outside 1–16; ValueError: a decoder-only model.
    """
    check_beam_size(beam_size)
    cfg = model.cfg
    if not cfg.is_encoder_decoder:
        raise ValueError("beam_search_batch translates; a decoder-only model continues prompts one at a time")
    memory, memory_mask = encode_batch(model, src_batch)
    feed = torch.full((len(src_batch), 1), cfg.bos_id, dtype=torch.long, device=model.device)
    limits = source_limits(cfg, src_batch, max_new_tokens)
    return _beam_search_rows(model, feed, memory, memory_mask, limits, beam_size, alpha, False, loop_times)


def beam_translate_texts(
    model: Transformer,
    tokenizer: Tokenizer,
    texts: list[str],
    beam: int = 4,
    alpha: float = 0.6,
    batch_size: int = 32,
    loop_times: int = 0,
) -> list[str]:
    """The best beam-search translation of each text (:func:`beam_search_batch`, ``batch_size`` sentences ×
    ``beam`` rows per decoder step); as :func:`~decoding.batched.translate_texts` otherwise: order preserved, an
    empty or unusable text gives an empty string. ``loop_times`` as :func:`beam_search_batch`.

    Raises:
        SamplingError: ``beam`` outside 1–16.
    """
    check_beam_size(beam)

    def decode(m: Transformer, src_batch: list[list[int]]) -> list[list[int]]:
        results = beam_search_batch(m, src_batch, beam, alpha, loop_times=loop_times)
        return [strip_eos(r.hypotheses[0].tokens, m.cfg.eos_id) for r in results]

    return translate_texts(model, tokenizer, texts, batch_size, decode_batch=decode)


@dataclass(frozen=True)
class BeamState:
    """Beam search after ``step`` steps (step 0 = only ``<bos>``), rebuilt from a :class:`BeamResult`; frozen like it.

    Attributes:
        step: steps taken.
        open: the open beams after this step, in the search's order (``finished`` False; ``score`` =
            ``log_prob / lp(len)``).
        finished: hypotheses closed with ``<eos>`` so far, in closing order.
        candidates: what this step considered, best first: ``(parent_tokens, token_id, cumulative_log_prob,
            kept)``; empty at step 0.
    """

    step: int
    open: tuple[Hypothesis, ...]
    finished: tuple[Hypothesis, ...]
    candidates: tuple[tuple[tuple[int, ...], int, float, bool], ...]

    def best(self) -> Hypothesis | None:
        """The highest-scoring hypothesis, open or finished, at this point of the search."""
        return max(self.open + self.finished, key=lambda h: h.score, default=None)


def beam_states(result: BeamResult, alpha: float, eos_id: int) -> tuple[BeamState, ...]:
    """Every intermediate state of a finished search: ``states[t]`` after ``t`` steps, ``t = 0 … len(steps)``.

    Beam search is deterministic, so stepping through it is replaying ``result.steps``: the open beams of step
    ``t`` are the kept non-``<eos>`` candidates of step ``t`` (in order), exactly as :func:`beam_search` builds
    them; a kept ``<eos>`` candidate closes a hypothesis.
    """
    states = [BeamState(0, (Hypothesis((), 0.0, 0.0, False),), (), ())]
    for t, cands in enumerate(result.steps, start=1):
        prev = states[-1]
        open_: list[Hypothesis] = []
        finished, considered = list(prev.finished), []
        for parent, token, lp, kept in cands:
            base = prev.open[parent].tokens if parent < len(prev.open) else ()
            considered.append((base, int(token), float(lp), bool(kept)))
            if not kept:
                continue
            seq = base + (int(token),)
            hyp = Hypothesis(seq, float(lp), hypothesis_score(float(lp), len(seq), alpha), int(token) == eos_id)
            (finished if hyp.finished else open_).append(hyp)
        states.append(BeamState(t, tuple(open_), tuple(finished), tuple(considered)))
    return tuple(states)
