"""Inside one attention head: one query's vector, every key's, the scores they make, the weights, what is read.

Vaswani et al. (2017), eq. (1), for one query row ``i`` of one head::

    score_j  = q·k_j / √d_k = Σ_d q_d·k_{j,d} / √d_k          (each dimension d adds q_d·k_{j,d} / √d_k)
    logit_j  = score_j (+ ALiBi's −m_h·|i − j|), −∞ where the mask hides key j
    w        = softmax(logit)                                   (the row of the attention heatmap)
    output   = Σ_j w_j · v_j                                    (the head's output, before Wᴼ)

The numbers are the model's own: :func:`query_key` reads one head and one query out of the trace of
:func:`reading.trace.trace_pair`, the vectors the module's forward pass computed (no KV cache), so pre-LN
(``LayerNorm(x)``) or post-LN (the residual stream ``x``), RoPE's rotation and ALiBi's bias are whatever the model
does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from model.transformer import Transformer
from reading.trace import Trace, attention_module, trace_pair


@dataclass(frozen=True, eq=False)
class QueryKey:
    """Every number of one head for one query (CPU float32 inference tensors; ``keys`` = the number of keys).

    Attributes:
        kind / layer / head / query: what this is (0-based; ``kind`` as :mod:`reading.trace` names it).
        d_k: the head's width; scale: ``1/√d_k``.
        position: ``"rope"``, ``"alibi"`` or ``None`` (what acts inside this attention).
        q_raw: ``[d_k]`` the query vector ``x_i W_Q + b_Q`` (this head's slice), before any rotation.
        k_raw: ``[keys, d_k]`` every key vector before any rotation.
        q / k: ``[d_k]`` / ``[keys, d_k]`` as they enter the score: rotated by RoPE, else ``q_raw`` / ``k_raw``.
        products: ``[keys, d_k]`` ``q ⊙ k_j`` (element-wise); ``products · scale`` sums to ``scores``.
        scores: ``[keys]`` ``q·k_j / √d_k``.
        scores_unrotated: ``[keys]`` ``q_raw·k_raw_j / √d_k`` for RoPE (the score with the position left out),
            else ``None``.
        bias: ``[keys]`` ALiBi's ``−m_h·|i − j|``, else ``None``; slope: ``m_h``, else ``None``.
        mask: bool ``[keys]``, ``True`` = may attend.
        logits: ``[keys]`` what the softmax reads: ``scores (+ bias)``, ``−inf`` where masked.
        weights: ``[keys]`` the softmax, the heatmap's row (masked keys exactly 0).
        v: ``[keys, d_k]`` every value vector; weighted: ``[keys, d_k]`` ``w_j · v_j``.
        output: ``[d_k]`` ``Σ_j w_j · v_j``, the head's output before Wᴼ.
        query_position: the query's absolute position; key_positions: ``[keys]`` the keys'.
    """

    kind: str
    layer: int
    head: int
    query: int
    d_k: int
    scale: float
    position: str | None
    q_raw: torch.Tensor
    k_raw: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    products: torch.Tensor
    scores: torch.Tensor
    scores_unrotated: torch.Tensor | None
    bias: torch.Tensor | None
    slope: float | None
    mask: torch.Tensor
    logits: torch.Tensor
    weights: torch.Tensor
    v: torch.Tensor
    weighted: torch.Tensor
    output: torch.Tensor
    query_position: int
    key_positions: torch.Tensor

    @property
    def contributions(self) -> torch.Tensor:
        """``[keys, d_k]`` what each dimension adds to each score, ``q_d·k_{j,d} / √d_k``; rows sum to ``scores``."""
        return self.products * self.scale


#: The fields of :class:`QueryKey` that hold tensors, in field order (``scores_unrotated`` and ``bias`` are ``None``
#: where the model has no rotation or bias): what a download writes and what the trace's tests compare.
TENSORS: tuple[str, ...] = tuple(f.name for f in fields(QueryKey) if "Tensor" in str(f.type))


@torch.inference_mode()
def query_key(trace: Trace, kind: str, layer: int, head: int, query: int) -> QueryKey:
    """One head's numbers for one query, read from a trace (:func:`reading.trace.trace_pair`): the vectors, scores
    and weights the model's forward pass computed, so the weights are the heatmap's row.

    Raises:
        ValueError: no such kind or layer in the trace, or ``head`` / ``query`` out of range.
    """
    m = trace.module(kind, layer)
    if not 0 <= head < m.n_heads:
        raise ValueError(f"head {head} is out of range: the model has heads 0–{m.n_heads - 1}")
    q_len = m.q.size(1)
    if not 0 <= query < q_len:
        raise ValueError(f"query {query} is out of range: there are queries 0–{q_len - 1}")
    scores = m.scores[head, query]
    bias = None if m.bias is None else m.bias[head, query]
    row_mask = m.mask[query]
    logits = (scores + bias if bias is not None else scores.clone()).masked_fill(~row_mask, float("-inf"))
    q_raw, k_raw = m.q_raw[head, query], m.k_raw[head]
    unrotated = (q_raw @ k_raw.T) * m.scale if m.position == "rope" else None
    q, k, v, w = m.q[head, query], m.k[head], m.v[head], m.weights[head, query]
    weighted = w[:, None] * v
    return QueryKey(
        kind=kind,
        layer=layer,
        head=head,
        query=query,
        d_k=m.d_k,
        scale=m.scale,
        position=m.position,
        q_raw=q_raw,
        k_raw=k_raw,
        q=q,
        k=k,
        products=q[None] * k,
        scores=scores,
        scores_unrotated=unrotated,
        bias=bias,
        slope=None if m.slopes is None else float(m.slopes[head]),
        mask=row_mask,
        logits=logits,
        weights=w,
        v=v,
        weighted=weighted,
        output=weighted.sum(0),
        query_position=int(m.q_positions[query]),
        key_positions=m.k_positions,
    )


def inspect_query(
    model: Transformer, src_ids: list[int] | None, tgt_ids: list[int], kind: str, layer: int, head: int, query: int
) -> QueryKey:
    """:func:`query_key` for ``src_ids`` / ``tgt_ids`` in one call (one traced pass; a page that shows many
    queries of one sentence keeps the trace and calls :func:`query_key` instead).

    Raises:
        ValueError: as :func:`reading.trace.trace_pair` and :func:`query_key`.
    """
    attention_module(model, kind, layer)  # a bad kind or layer is refused before the forward pass
    return query_key(trace_pair(model, None, src_ids, tgt_ids), kind, layer, head, query)
