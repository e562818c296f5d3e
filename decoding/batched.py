"""Batched greedy decoding with the KV cache: many sentences at once, for evaluation, back-translation and a room
of visitors' first pages.

Sources of any lengths are right-padded and encoded together; each step decodes one token for every open
sentence, and a sentence's output does not depend on which sentences share its batch (each keeps its own length
cap, :func:`source_limits`). The one-sentence stepping API the pages use is :class:`~decoding.stepping.Stepper`;
:func:`decoding.decoded_batch.greedy_decodings` gives, for many sentences at once, the frozen decodings it would give
one by one.
"""

from __future__ import annotations

from typing import Callable

import torch

from decoding.loops import GUARD_MAX_TOKENS, ban_loops
from decoding.stepping import InputError, input_limit, prepare_source
from model.config import default_max_new_tokens
from model.tokenizing import Tokenizer
from model.transformer import Transformer


def source_limits(cfg, src_batch: list[list[int]], max_new_tokens: int | None = None) -> list[int]:
    """Length cap of each output: ``max_new_tokens`` if given, else :func:`default_max_new_tokens` of that
    sentence's own source (the Stepper's rule), never past ``max_len − 1``. Per sentence, so that an output does
    not depend on which sentences share its batch."""
    return [min(max_new_tokens or default_max_new_tokens(cfg, len(s)), cfg.max_len - 1) for s in src_batch]


def encode_batch(model: Transformer, src_batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode sources of any lengths at once, right-padded with ``<pad>``.

    Returns:
        ``(memory [batch, src_len, d_model], memory_mask [batch, 1, 1, src_len])``, ``src_len`` the longest source;
        the mask is False on padding (it must go with every cached decoding step: the cross-attention cache holds
        K/V of the padding too).
    """
    cfg = model.cfg
    width = max(len(s) for s in src_batch)
    src = torch.full((len(src_batch), width), cfg.pad_id, dtype=torch.long, device=model.device)
    for i, s in enumerate(src_batch):
        src[i, : len(s)] = torch.tensor(s)
    memory, _ = model.encode(src)
    return memory, model.src_mask(src)


@torch.inference_mode()
def greedy_batch(
    model: Transformer,
    src_batch: list[list[int]],
    max_new_tokens: int | None = None,
    pick: Callable[[torch.Tensor], torch.Tensor] | None = None,
    loop_times: int = 0,
) -> list[list[int]]:
    """Greedy translation of many sources at once with the KV cache (for evaluation).

    Args:
        src_batch: encoder ids per sentence (``<eos>`` included), any lengths.
        max_new_tokens: length cap; default per sentence, :func:`source_limits` (a model that never says ``<eos>``
            then costs 2 × source + 10 steps, not ``max_len``).
        pick: ``pick(logits [batch, vocab]) -> ids [batch]`` chooses each row's next token instead of the argmax
            (:func:`decoding.sampling.sample_batch` samples).
        loop_times: 0, or the loop guard: a token that would write a phrase (1 to 8 tokens) this many times in a
            row is never chosen (:func:`~decoding.loops.ban_loops`). 3 stops the loops of a lost translator and keeps
            the German ", die die"; 2 bans every immediate repeat.

    Returns:
        Generated ids per sentence, ``<eos>`` and later tokens removed.
    """
    cfg = model.cfg
    dev = model.device
    memory, memory_mask = encode_batch(model, src_batch)
    limits = torch.tensor(source_limits(cfg, src_batch, max_new_tokens), device=dev)
    cache = model.new_cache()
    tokens = torch.full((len(src_batch), 1), cfg.bos_id, dtype=torch.long, device=dev)
    done = torch.zeros(len(src_batch), dtype=torch.bool, device=dev)
    out = []
    for step in range(int(limits.max())):
        hidden = model.decode(tokens[:, -1:], memory, memory_mask, cache=cache).hidden
        logits = model.next_token_logits(hidden[:, -1])
        if loop_times:  # a loop closing now lies within the last times × GUARD_MAX_TOKENS tokens
            recent = tokens[:, 1:][:, -loop_times * GUARD_MAX_TOKENS :].tolist()
            ban_loops(logits, [None if d else seq for seq, d in zip(recent, done.tolist(), strict=True)], loop_times)
        nxt = logits.argmax(-1) if pick is None else pick(logits)
        nxt = torch.where(done, torch.full_like(nxt, cfg.pad_id), nxt)
        out.append(nxt)
        done |= (nxt == cfg.eos_id) | (limits <= step + 1)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        if bool(done.all()):
            break
    gen = torch.stack(out, dim=1).tolist()
    result = []
    for row in gen:
        ids = []
        for t in row:
            if t in (cfg.eos_id, cfg.pad_id):
                break
            ids.append(t)
        result.append(ids)
    return result


def translate_texts(
    model: Transformer,
    tokenizer: Tokenizer,
    texts: list[str],
    batch_size: int = 64,
    decode_batch: Callable[[Transformer, list[list[int]]], list[list[int]]] = greedy_batch,
) -> list[str]:
    """Translations of ``texts`` (sorted by length internally for speed; order preserved).

    ``decode_batch(model, src_batch) -> ids per sentence`` translates one batch of encoder ids: greedy by
    default (``partial(greedy_batch, loop_times=3)`` with the loop guard), :func:`~decoding.beam.beam_translate_texts`
    passes beam search.

    Texts that are empty or unusable give an empty string rather than an exception.
    """
    cfg = model.cfg
    prepared: dict[int, list[int]] = {}  # the usable texts' ids, by index
    for i, t in enumerate(texts):
        try:
            ids = prepare_source(tokenizer, t, input_limit(cfg), cfg.eos_id, cfg.unk_id).ids
        except InputError:
            continue
        if ids:
            prepared[i] = ids
    order = sorted(prepared, key=lambda i: len(prepared[i]))
    results = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        for i, ids in zip(chunk, decode_batch(model, [prepared[i] for i in chunk]), strict=True):
            results[i] = tokenizer.decode(ids)
    return results
