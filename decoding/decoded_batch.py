"""The traced greedy decodings of many sentences in one batched pass: what a room of visitors arriving together
with sentences of their own reads on their first pages.

A server that decodes each visitor's new sentence alone reads every weight of the decoder once per token per
sentence; a batch reads them once per token for all its sentences (on two CPU cores, sixteen sentences cost about
as much as four alone). :func:`greedy_decodings` gives for each sentence exactly the frozen
:class:`~decoding.decoded.Decoding` that ``decode(Stepper(…))`` gives it alone: the same tokens, the same records,
numbers equal to float rounding.
"""

from __future__ import annotations

from typing import Sequence

import torch

from decoding.batched import encode_batch
from decoding.decoded import Decoding, decode
from decoding.stepping import TOP_KEPT, Stepper, StepRecord
from model.hf.generation import decoding_cap, forced_eos
from model.transformer import Transformer

#: A step whose two most probable tokens lie closer than this (in log-probability, nats) is a close call: a
#: batched pass sums in another order than a solo one (padding, other matrix shapes), about 1e-6 apart in float32,
#: and could pick the other token. Such a sentence is decoded again alone, so its tokens are always the solo
#: decoding's. A model computing in a coarser type widens it by as much as its rounding is coarser.
CLOSE_CALL_NATS = 1e-4


def close_call_nats(dtype: torch.dtype) -> float:
    """:data:`CLOSE_CALL_NATS` for a model computing in ``dtype`` (float16: 0.8 nats, bfloat16: 6.6)."""
    return CLOSE_CALL_NATS * torch.finfo(dtype).eps / torch.finfo(torch.float32).eps


@torch.inference_mode()
def greedy_decodings(
    model: Transformer,
    src_batch: list[list[int]],
    max_new_tokens: Sequence[int | None] | None = None,
    forced_eos_id: int | None = None,
) -> list[Decoding]:
    """What ``decode(Stepper(model, src, max_new_tokens=m, forced_eos_id=…))`` gives for each source, traced and
    frozen, computed for all of them in one batched greedy pass with the KV cache.

    Each :class:`~decoding.stepping.StepRecord` holds what the solo Stepper's would: the chosen token and its
    probability, the log-probabilities of the tokens a slim record keeps (:meth:`~decoding.stepping.StepRecord.slim`:
    the shared decodings hold no ``[vocab]`` row), ``cross_attention [layers, heads, src_len]`` (this source's own
    length, not the batch's padded one), ``self_attention [layers, heads, prefix_len]``, the KV cache bytes a
    one-sentence cache holds after the step, the :data:`~decoding.stepping.TOP_KEPT` most probable tokens. The tokens
    are the solo decoding's: a sentence with a close call (:data:`CLOSE_CALL_NATS`) is decoded again alone; the
    numbers agree with a solo decoding's to float rounding (about 1e-6). A sentence leaves the batch when it ends.

    Args:
        src_batch: encoder ids per sentence (``<eos>`` included), any lengths.
        max_new_tokens: per sentence, the Stepper's ``max_new_tokens`` (``None``: ``max_len``); kept within
            ``max_len − 1`` as the Stepper does.
        forced_eos_id: the token a decoding at its cap ends with (the Stepper's ``forced_eos_id``).

    Raises:
        ValueError: a decoder-only model (its prompts would need left padding), or an empty source.
    """
    cfg = model.cfg
    if not cfg.is_encoder_decoder:
        raise ValueError("greedy_decodings batches an encoder-decoder model's sources; decode a prompt alone")
    if any(not s for s in src_batch):
        raise ValueError("an encoder-decoder model needs src_ids")
    caps = [min(m or cfg.max_len, cfg.max_len - 1) for m in (max_new_tokens or [None] * len(src_batch))]
    dev = model.device
    memory, memory_mask = encode_batch(model, src_batch)
    cache = model.new_cache()
    records: list[list[StepRecord]] = [[] for _ in src_batch]
    tokens: list[list[int]] = [[] for _ in src_batch]
    close = [cap < 1 for cap in caps]  # a cap that allows no token (the Stepper's own business): decoded alone
    rows = [i for i, cap in enumerate(caps) if cap >= 1]  # the sentences still decoding, in the batch's order
    cross_bytes = [0] * len(src_batch)
    width = memory.size(1)
    margin = close_call_nats(memory.dtype)
    if len(rows) < len(src_batch):
        index = torch.tensor(rows, dtype=torch.long, device=dev)
        memory, memory_mask = memory.index_select(0, index), memory_mask.index_select(0, index)
    last = torch.full((len(rows), 1), cfg.bos_id, dtype=torch.long, device=dev)
    while rows:
        out = model.decode(last, memory, memory_mask, cache=cache, trace=True)
        log_probs = torch.log_softmax(model.next_token_logits(out.hidden[:, -1]).float(), dim=-1)
        cross = torch.stack([w[:, :, -1] for w in out.cross_weights], dim=1)  # [rows, layers, heads, width]
        self_w = torch.stack([w[:, :, -1] for w in out.self_weights], dim=1)  # [rows, layers, heads, prefix_len]
        top_p, top_i = log_probs.exp().topk(min(TOP_KEPT, log_probs.size(-1)), dim=-1)
        picked = log_probs.argmax(-1).tolist()
        top_lp = log_probs.topk(2, dim=-1).values.tolist() if log_probs.size(-1) > 1 else None
        nbytes = cache.nbytes()
        self_bytes, cross_per_position = nbytes["self"] // len(rows), nbytes["cross"] // (len(rows) * width)
        keep = []
        for j, i in enumerate(rows):
            n_src = len(src_batch[i])
            cross_bytes[i] = cross_per_position * n_src
            token = picked[j]
            if top_lp is not None and top_lp[j][0] - top_lp[j][1] < margin:
                close[i] = True
            forced = forced_eos_id is not None and len(records[i]) == caps[i] - 1 and token != forced_eos_id
            if forced:
                token = forced_eos_id
            # slimmed at once: a [vocab] row a step kept to the batch's end was 130 MB for sixteen sentences at the
            # length cap (16,000 pieces; 470 MB at a 58k vocabulary), all of it dropped by the slimming then
            row_lp = log_probs[j]
            records[i].append(
                StepRecord(
                    token,
                    float(row_lp[token].exp()),
                    row_lp,
                    cross[j, :, :, :n_src].clone(),
                    self_w[j].clone(),
                    self_bytes + cross_bytes[i],
                    tuple(top_i[j].tolist()),
                    tuple(top_p[j].tolist()),
                    forced,
                ).slim()
            )
            tokens[i].append(token)
            if token != cfg.eos_id and len(records[i]) < caps[i]:
                keep.append(j)
        if len(keep) < len(rows):  # finished sentences leave the batch: the cache, memory and mask shrink with it
            index = torch.tensor(keep, dtype=torch.long, device=dev)
            cache.select(index)
            memory, memory_mask = memory.index_select(0, index), memory_mask.index_select(0, index)
            rows = [rows[j] for j in keep]
        last = torch.tensor([[tokens[i][-1]] for i in rows], dtype=torch.long, device=dev)
    return [
        decode(Stepper(model, list(src), max_new_tokens=cap, forced_eos_id=forced_eos_id))
        if close[i]
        else Decoding(
            (cfg.bos_id,), tuple(tokens[i]), tuple(r.slim() for r in records[i]), cap, cfg.eos_id, cross_bytes[i]
        )
        for i, (src, cap) in enumerate(zip(src_batch, caps, strict=True))
    ]


def checkpoint_decodings(ckpt, sources: list[list[int]]) -> list[Decoding]:
    """:func:`greedy_decodings` of ``sources`` with ``ckpt``'s own length caps and forced end (a Hugging Face
    folder's generation config, :mod:`model.hf.generation`), as the pages' Stepper decodes each of them alone."""
    caps = [decoding_cap(ckpt.config, ids, ckpt.generation) for ids in sources]
    return greedy_decodings(ckpt.model, sources, caps, forced_eos(ckpt.generation))
