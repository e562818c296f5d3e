"""Inside one attention head: one query's vector, every key's, the scores they make, the weights, what is read.

Vaswani et al. (2017), eq. (1), for one query row ``i`` of one head::

    score_j  = q·k_j / √d_k = Σ_d q_d·k_{j,d} / √d_k          (each dimension d adds q_d·k_{j,d} / √d_k)
    logit_j  = score_j (+ ALiBi's −m_h·|i − j|), −∞ where the mask hides key j
    w        = softmax(logit)                                   (the row of the attention heatmap)
    output   = Σ_j w_j · v_j                                    (the head's output, before Wᴼ)

The numbers are the model's own: :func:`layer_inputs` runs the traced forward pass that
:func:`model.trace.trace_pair` runs (no KV cache) and records, with a forward pre-hook on every attention module,
the inputs that pass feeds it, so pre-LN (``LayerNorm(x)``) or post-LN (the residual stream ``x``) is whatever
the model does; :func:`query_key` then applies that module's own projections, RoPE rotation, ALiBi bias and
softmax (:mod:`model.attention`) to them for one head and one query.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import torch
from torch import nn

from .attention import MultiHeadAttention, alibi_bias, rope_rotate, scaled_dot_product_weights
from .transformer import Transformer


@dataclass(frozen=True, eq=False)  # tensors inside: compared and hashed by identity
class LayerInputs:
    """What the model's forward pass fed one attention module (batch 1, CPU float32 inference tensors).

    Attributes:
        x_q: ``[q_len, d_model]`` the query side's input (after the sub-layer's LayerNorm when pre-LN).
        x_kv: ``[k_len, d_model]`` the key / value side's input (the encoder output ``memory`` for cross-attention).
        mask: bool ``[q_len, k_len]``, ``True`` = the query may attend to the key (causal and padding masks).
        positions: ``[q_len]`` the queries' absolute positions (the keys of self-attention sit at the same ones).
    """

    x_q: torch.Tensor
    x_kv: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor | None


@dataclass(frozen=True, eq=False)
class QueryKey:
    """Every number of one head for one query (CPU float32 inference tensors; ``keys`` = the number of keys).

    Attributes:
        kind / layer / head / query: what this is (0-based; ``kind`` as :mod:`model.trace` names it).
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


def attention_module(model: Transformer, kind: str, layer: int) -> MultiHeadAttention:
    """The attention module of ``kind`` (``encoder``, ``decoder``, ``cross``, ``self``) in ``layer`` (0-based).

    Raises:
        ValueError: the model has no such kind or layer (the message names the ones it has).
    """
    counts = model.cfg.attention_layers()
    if kind not in counts:
        raise ValueError(f"this model has no {kind!r} attention; it has {', '.join(counts)}")
    if not 0 <= layer < counts[kind]:
        raise ValueError(f"layer {layer} is out of range: {kind} attention has layers 0–{counts[kind] - 1}")
    if kind == "encoder":
        return model.encoder_layers[layer].self_attn
    block = model.decoder_layers[layer]
    return block.cross_attn if kind == "cross" else block.self_attn


def _modules(model: Transformer) -> dict[tuple[str, int], MultiHeadAttention]:
    return {(kind, layer): attention_module(model, kind, layer)
            for kind, n in model.cfg.attention_layers().items() for layer in range(n)}


@torch.inference_mode()
def layer_inputs(model: Transformer, src_ids: list[int] | None, tgt_ids: list[int]
                 ) -> Mapping[tuple[str, int], LayerInputs]:
    """Run the traced forward pass of :func:`model.trace.trace_pair` over ``src_ids`` (ignored by a decoder-only
    model) and the decoder inputs ``tgt_ids`` (``<bos>`` first), and return what it fed every attention module.

    Returns:
        A read-only mapping ``(kind, layer) → LayerInputs`` for every kind and layer of the model.

    Raises:
        ValueError: an encoder-decoder model without ``src_ids``, or no ``tgt_ids``.
    """
    if not tgt_ids:
        raise ValueError("the decoder needs at least one input id (<bos>)")
    if model.cfg.is_encoder_decoder and not src_ids:
        raise ValueError("an encoder-decoder model needs src_ids")
    seen: dict[tuple[str, int], LayerInputs] = {}
    hooks = []
    for where, module in _modules(model).items():
        signature = inspect.signature(module.forward)

        def record(mod: nn.Module, args: tuple, kwargs: dict, where=where, signature=signature) -> None:
            bound = signature.bind(*args, **kwargs).arguments
            x_q = bound["x_q"][0].float()
            x_kv = x_q if bound.get("x_kv") is None else bound["x_kv"][0].float()
            mask = bound.get("mask")
            shape = (x_q.size(0), x_kv.size(0))
            mask = torch.ones(shape, dtype=torch.bool) if mask is None else mask.expand(1, 1, *shape)[0, 0]
            positions = bound.get("positions")
            seen[where] = LayerInputs(x_q.cpu(), x_kv.cpu(), mask.cpu().clone(),
                                      None if positions is None else positions.cpu().clone())

        hooks.append(module.register_forward_pre_hook(record, with_kwargs=True))
    try:
        dev = model.device
        tgt = torch.tensor([list(tgt_ids)], device=dev)
        if model.cfg.is_encoder_decoder:
            src = torch.tensor([list(src_ids)], device=dev)
            memory, _ = model.encode(src, trace=True)
            model.decode(tgt, memory, model.src_mask(src), trace=True)
        else:
            model.decode(tgt, trace=True)
    finally:
        for hook in hooks:
            hook.remove()
    return MappingProxyType(seen)


def _head(module: MultiHeadAttention, linear: nn.Linear, x: torch.Tensor, head: int) -> torch.Tensor:
    """``x [seq, d_model]`` through one of the module's projections, split as the module splits it: ``[seq, d_k]``."""
    return module._split(linear(x[None]))[0, head]


@torch.inference_mode()
def query_key(model: Transformer, inputs: LayerInputs, kind: str, layer: int, head: int, query: int) -> QueryKey:
    """One head's numbers for one query, from the inputs the forward pass fed its module (:func:`layer_inputs`).

    The weights are computed as the traced path computes them (:func:`model.attention.scaled_dot_product_weights`
    over every query of the head), so they are the heatmap's row.

    Raises:
        ValueError: no such kind or layer, or ``head`` / ``query`` out of range.
    """
    module = attention_module(model, kind, layer)
    if not 0 <= head < module.n_heads:
        raise ValueError(f"head {head} is out of range: the model has heads 0–{module.n_heads - 1}")
    q_len = inputs.x_q.size(0)
    if not 0 <= query < q_len:
        raise ValueError(f"query {query} is out of range: there are queries 0–{q_len - 1}")
    dev = model.device
    x_q, x_kv, mask = inputs.x_q.to(dev), inputs.x_kv.to(dev), inputs.mask.to(dev)
    q_raw = _head(module, module.q_proj, x_q, head)  # [q_len, d_k]
    k_raw = _head(module, module.k_proj, x_kv, head)  # [k_len, d_k]
    v = _head(module, module.v_proj, x_kv, head)
    q, k = q_raw, k_raw
    q_pos = inputs.positions.to(dev) if inputs.positions is not None else torch.arange(q_len, device=dev)
    k_pos = torch.arange(x_kv.size(0), device=dev)
    if module.position == "rope":  # self-attention only: the keys sit at the queries' positions (no cache)
        q, k = rope_rotate(q_raw, q_pos), rope_rotate(k_raw, q_pos)
        k_pos = q_pos
    bias = slope = None
    if module.position == "alibi":
        bias = alibi_bias(module.slopes, q_pos, k_pos)[head].to(q.dtype)  # [q_len, k_len]
        slope = float(module.slopes[head])
    weights = scaled_dot_product_weights(q, k, mask, bias)  # [q_len, k_len], as the traced path
    scale = 1.0 / math.sqrt(module.d_k)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(module.d_k))[query]
    logits = scores + bias[query] if bias is not None else scores.clone()
    row_mask = mask[query]
    logits = logits.masked_fill(~row_mask, float("-inf"))
    unrotated = (q_raw[query] @ k_raw.T) / math.sqrt(module.d_k) if module.position == "rope" else None
    w = weights[query]
    weighted = w[:, None] * v
    cpu = lambda t: None if t is None else t.float().cpu()  # noqa: E731
    return QueryKey(
        kind=kind, layer=layer, head=head, query=query, d_k=module.d_k, scale=scale, position=module.position,
        q_raw=cpu(q_raw[query]), k_raw=cpu(k_raw), q=cpu(q[query]), k=cpu(k), products=cpu(q[query][None] * k),
        scores=cpu(scores), scores_unrotated=cpu(unrotated), bias=None if bias is None else cpu(bias[query]),
        slope=slope, mask=row_mask.cpu(), logits=cpu(logits), weights=cpu(w), v=cpu(v), weighted=cpu(weighted),
        output=cpu(weighted.sum(0)), query_position=int(q_pos[query]), key_positions=k_pos.cpu(),
    )


def inspect_query(model: Transformer, src_ids: list[int] | None, tgt_ids: list[int], kind: str, layer: int,
                  head: int, query: int) -> QueryKey:
    """:func:`query_key` for ``src_ids`` / ``tgt_ids`` in one call (one forward pass; a page that shows many
    queries of one sentence keeps :func:`layer_inputs` and calls :func:`query_key` instead).

    Raises:
        ValueError: as :func:`layer_inputs` and :func:`query_key`.
    """
    attention_module(model, kind, layer)  # a bad kind or layer is refused before the forward pass
    return query_key(model, layer_inputs(model, src_ids, tgt_ids)[(kind, layer)], kind, layer, head, query)
