"""Summaries of attention: rollout, per-head statistics, word-level merging, and head ablation.

All weights follow the project convention ``[layers, heads, q_len, k_len]`` with rows = queries.
"""

from __future__ import annotations

import torch

from decoding.stepping import Stepper
from model.transformer import Transformer


def attention_rollout(weights: torch.Tensor, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020, §3): how much each input position flows into each output.

    Each layer's head-averaged attention is mixed with the identity for the residual connection,
    ``Â_l = (1 − residual) · mean_h(A_l) + residual · I``, rows renormalised, and the layers multiplied:
    ``R = Â_L · … · Â_1``.

    Args:
        weights: self-attention ``[layers, heads, n, n]`` (encoder, or a decoder's masked self-attention).

    Returns:
        ``[n, n]`` rollout; every row sums to 1.

    Raises:
        ValueError: the attention is not square (rollout needs queries and keys over the same positions).
    """
    if weights.dim() != 4 or weights.size(-1) != weights.size(-2):
        raise ValueError(f"rollout needs self-attention [layers, heads, n, n], got {tuple(weights.shape)}")
    n = weights.size(-1)
    eye = torch.eye(n, dtype=weights.dtype)
    result = eye.clone()
    for layer in weights:
        a = (1 - residual) * layer.mean(0) + residual * eye
        a = a / a.sum(-1, keepdim=True)
        result = a @ result
    return result


def head_statistics(weights: torch.Tensor, eos_index: int | None = None) -> dict[str, torch.Tensor]:
    """Per-head statistics, each ``[layers, heads]``, averaged over query rows.

    * ``entropy``: mean row entropy in nats (0 = one key; ``ln k_len`` = uniform);
    * ``same``: weight on the key at the query's own position (diagonal; self-attention only);
    * ``previous``: weight on the key one position before;
    * ``first``: weight on the first key (``<bos>`` in the decoder: a common attention sink);
    * ``eos``: weight on the key ``eos_index`` (e.g. the source's final ``<eos>``), when given;
    * ``max``: mean of each row's largest weight.

    Args:
        weights: ``[layers, heads, q_len, k_len]``; for cross-attention ``same``/``previous`` compare row i with
            column i, which is rarely meaningful.
    """
    L, H, q, k = weights.shape
    w = weights.float()
    entropy = -(w.clamp_min(1e-12).log() * w).sum(-1).mean(-1)
    offset = k - q  # a query's absolute position when the keys include earlier (cached) positions
    rows = torch.arange(q)
    same_cols = rows + offset
    # cross-attention may have more queries than keys (a translation longer than its source): offset < 0
    valid_same = (same_cols >= 0) & (same_cols < k)
    same = w[..., rows[valid_same], same_cols[valid_same]].mean(-1) if valid_same.any() else torch.zeros(L, H)
    prev_cols = same_cols - 1
    valid_prev = (prev_cols >= 0) & (prev_cols < k)
    previous = w[..., rows[valid_prev], prev_cols[valid_prev]].mean(-1) if valid_prev.any() else torch.zeros(L, H)
    stats = {
        "entropy": entropy,
        "same": same,
        "previous": previous,
        "first": w[..., 0].mean(-1),
        "max": w.max(-1).values.mean(-1),
    }
    if eos_index is not None:
        stats["eos"] = w[..., eos_index].mean(-1)
    return stats


#: What a piece that starts a word begins with: ``▁`` (Metaspace, SentencePiece), GPT-2's ``Ġ`` (a leading space),
#: or ``␣`` (how the pages show ``Ġ``).
WORD_STARTS = ("▁", "Ġ", "␣")


def word_ids(tokens: list[str]) -> list[int]:
    """Word index of each piece: a piece starting with one of :data:`WORD_STARTS` (or a special token) opens a new
    word."""
    ids, current = [], -1
    for i, piece in enumerate(tokens):
        if (
            i == 0
            or piece.startswith(WORD_STARTS)
            or (piece.startswith("<") and piece.endswith(">"))
            or (tokens[i - 1].startswith("<") and tokens[i - 1].endswith(">"))
        ):
            current += 1
        ids.append(current)
    return ids


def merge_words(weights: torch.Tensor, query_words: list[int], key_words: list[int]) -> torch.Tensor:
    """Word-level attention from piece-level: sum over a word's key pieces, mean over its query pieces.

    Args:
        weights: ``[..., q_len, k_len]``; query_words / key_words: word index of each piece (:func:`word_ids`).

    Returns:
        ``[..., n_query_words, n_key_words]``; each row still sums to 1 (summing keys conserves mass, and a
        mean of rows that sum to 1 sums to 1).
    """
    q_index = torch.tensor(query_words)
    k_index = torch.tensor(key_words)
    n_qw, n_kw = int(q_index.max()) + 1, int(k_index.max()) + 1
    key_merge = torch.zeros(weights.size(-1), n_kw, dtype=weights.dtype)
    key_merge[torch.arange(len(key_words)), k_index] = 1.0
    query_merge = torch.zeros(n_qw, weights.size(-2), dtype=weights.dtype)
    query_merge[q_index, torch.arange(len(query_words))] = 1.0
    query_merge = query_merge / query_merge.sum(-1, keepdim=True)
    return query_merge @ weights @ key_merge


@torch.inference_mode()
def sequence_log_probs(
    model: Transformer,
    src_ids: list[int] | None,
    tgt_ids: list[int],
    head_masks: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Log-probability of each target token given its prefix (teacher forcing), optionally with heads ablated.

    Args:
        tgt_ids: ``<bos> y₁ … yₙ`` (the scored tokens are ``y₁ … yₙ``).
        head_masks: kind → ``[layers, heads]`` multipliers (0 removes a head's output before Wᴼ), kinds
            ``encoder``, ``decoder``, ``cross`` (or ``self`` for decoder-only).

    Returns:
        ``[n]`` log-probabilities of ``y₁ … yₙ``.
    """
    masks = head_masks or {}
    dev = model.device
    tgt = torch.tensor([tgt_ids], device=dev)
    if model.cfg.is_encoder_decoder:
        src = torch.tensor([src_ids], device=dev)
        memory, _ = model.encode(src, head_mask=masks.get("encoder"))
        out = model.decode(
            tgt[:, :-1],
            memory,
            model.src_mask(src),
            self_head_mask=masks.get("decoder"),
            cross_head_mask=masks.get("cross"),
        )
    else:
        out = model.decode(tgt[:, :-1], self_head_mask=masks.get("self"))
    log_probs = torch.log_softmax(model.logits(out.hidden[0]).float(), dim=-1)
    return log_probs.gather(-1, tgt[0, 1:, None].to(log_probs.device)).squeeze(-1).cpu()


def ablation_sweep(
    model: Transformer, src_ids: list[int] | None, tgt_ids: list[int], layers: dict[str, list[int]] | None = None
) -> dict[str, torch.Tensor]:
    """Importance of every head: the drop in total log-probability of ``tgt_ids`` when that head alone is removed.

    Args:
        layers: kind → the layers whose heads are removed one at a time (default: every layer of every kind);
            one scoring per head, so a large model may sweep a part only.

    Returns:
        kind → ``[layers, heads]`` drop in nats (positive = the head helped this output), for the kinds swept;
        the rows of layers not swept are NaN.
    """
    cfg = model.cfg
    base = float(sequence_log_probs(model, src_ids, tgt_ids).sum())
    kinds = cfg.attention_layers()
    wanted = layers if layers is not None else {kind: list(range(n)) for kind, n in kinds.items()}
    result = {}
    for kind, n_layers in kinds.items():
        if kind not in wanted:
            continue
        drop = torch.full((n_layers, cfg.n_heads), float("nan"))
        for layer in sorted(set(wanted[kind]) & set(range(n_layers))):
            for head in range(cfg.n_heads):
                mask = torch.ones(n_layers, cfg.n_heads)
                mask[layer, head] = 0.0
                drop[layer, head] = base - float(sequence_log_probs(model, src_ids, tgt_ids, {kind: mask}).sum())
        result[kind] = drop
    return result


@torch.inference_mode()
def greedy_with_head_masks(
    model: Transformer,
    src_ids: list[int] | None,
    head_masks: dict[str, torch.Tensor] | None = None,
    max_new_tokens: int | None = None,
    prefix_ids: list[int] | None = None,
) -> list[int]:
    """Greedy decoding with some heads switched off: a :class:`~decoding.stepping.Stepper` with head masks.

    Args:
        src_ids: encoder ids ``[src_len]`` (``<eos>`` included); ignored for decoder-only models.
        head_masks: kind → ``[layers, heads]`` multipliers (0 removes a head), kinds ``encoder``, ``decoder``,
            ``cross`` (or ``self`` for decoder-only); ``None`` or all ones = the plain model.
        max_new_tokens: stop after this many generated tokens (as :class:`~decoding.stepping.Stepper`: at most
            ``max_len`` positions in all), or at ``<eos>``.
        prefix_ids: target ids to start from (default ``[<bos>]``).

    Returns:
        The target ids ``[<bos>, y₁, …]`` including the final ``<eos>`` when one was produced (the same layout as
        ``Stepper.tokens``).
    """
    stepper = Stepper(model, src_ids, prefix_ids=prefix_ids, max_new_tokens=max_new_tokens, head_masks=head_masks)
    stepper.run_to_end()
    return stepper.tokens
