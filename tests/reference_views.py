"""The views as they were computed before they read one trace: an oracle for ``test_one_trace.py``.

Each function here runs the model its own way, as the pages once did: forward pre-hooks on every attention module
(the query·key view), the layers re-run by hand up to one module (the live numbers), one decoder step at a time with
the KV cache (the logit lens), and a layer-by-layer traced pass (attribution's attention side and the what-if). The
views now read :func:`reading.trace.trace_pair`; these independent computations say they still show the same numbers.
Test code only: the pages never call it.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import torch
from torch import nn

from model.attention import MultiHeadAttention, alibi_bias, rope_rotate, scaled_dot_product_weights
from model.recorder import Recorder
from model.transformer import Transformer, causal_mask
from reading.attention_scores import weighted_values
from reading.lens import lens_log_probs
from reading.qk import QueryKey
from reading.trace import attention_module


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


def _modules(model: Transformer) -> dict[tuple[str, int], MultiHeadAttention]:
    return {
        (kind, layer): attention_module(model, kind, layer)
        for kind, n in model.cfg.attention_layers().items()
        for layer in range(n)
    }


@torch.inference_mode()
def layer_inputs(
    model: Transformer, src_ids: list[int] | None, tgt_ids: list[int]
) -> Mapping[tuple[str, int], LayerInputs]:
    """Run the traced forward pass of :func:`reading.trace.trace_pair` over ``src_ids`` (ignored by a decoder-only
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
            seen[where] = LayerInputs(
                x_q.cpu(), x_kv.cpu(), mask.cpu().clone(), None if positions is None else positions.cpu().clone()
            )

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
        kind=kind,
        layer=layer,
        head=head,
        query=query,
        d_k=module.d_k,
        scale=scale,
        position=module.position,
        q_raw=cpu(q_raw[query]),
        k_raw=cpu(k_raw),
        q=cpu(q[query]),
        k=cpu(k),
        products=cpu(q[query][None] * k),
        scores=cpu(scores),
        scores_unrotated=cpu(unrotated),
        bias=None if bias is None else cpu(bias[query]),
        slope=slope,
        mask=row_mask.cpu(),
        logits=cpu(logits),
        weights=cpu(w),
        v=cpu(v),
        weighted=cpu(weighted),
        output=cpu(weighted.sum(0)),
        query_position=int(q_pos[query]),
        key_positions=k_pos.cpu(),
    )


def _sublayer_input(residual, x: torch.Tensor, norm_first: bool) -> torch.Tensor:
    """What a sub-layer reads from the residual stream ``x``: its LayerNorm first in a pre-LN model (``_Residual``)."""
    return residual.norm(x) if norm_first else x


def _decoder_mask(model: Transformer, tgt: torch.Tensor) -> torch.Tensor:
    """The decoder's self-attention mask over ``tgt [1, t]`` without a cache, as :meth:`Transformer.decode` builds
    it: causal, ``<pad>`` keys hidden except the start token at position 0."""
    t = tgt.size(1)
    real = tgt != model.cfg.pad_id
    real[:, 0] = True
    return causal_mask(t, t, tgt.device)[None, None] & real[:, None, None, :]


def _module_inputs(model: Transformer, src_ids, tgt_ids, kind: str, layer: int):
    """``(module, x_q, x_kv, mask, positions)`` of the attention module ``kind`` / ``layer`` on this sentence: the
    layers before it run on the traced path, as :func:`reading.trace.trace_pair` runs them (the same numbers)."""
    dev, cfg = model.device, model.cfg
    memory = memory_mask = None
    if cfg.is_encoder_decoder:
        src = torch.tensor([list(src_ids)], device=dev)
        src_mask, src_pos = model.src_mask(src), torch.arange(src.size(1), device=dev)
        x = model.embed_tokens(src)
        for enc in model.encoder_layers[: layer if kind == "encoder" else len(model.encoder_layers)]:
            x, _ = enc(x, src_mask, trace=True, positions=src_pos)
        if kind == "encoder":
            target = model.encoder_layers[layer]
            h = _sublayer_input(target.res_attn, x, cfg.norm_first)
            return target.self_attn, h, h, src_mask, src_pos
        memory = model.encoder_norm(x) if model.encoder_norm is not None else x
        memory_mask = src_mask
    tgt = torch.tensor([list(tgt_ids)], device=dev)
    self_mask, positions = _decoder_mask(model, tgt), torch.arange(tgt.size(1), device=dev)
    x = model.embed_tokens(tgt)
    for dec in model.decoder_layers[:layer]:
        x, _, _ = dec(x, self_mask, memory, memory_mask, trace=True, positions=positions)
    target = model.decoder_layers[layer]
    if kind != "cross":
        h = _sublayer_input(target.res_self, x, cfg.norm_first)
        return target.self_attn, h, h, self_mask, positions
    x, _ = target.res_self(x, lambda h: target.self_attn(h, h, self_mask, trace=True, positions=positions))
    return target.cross_attn, _sublayer_input(target.res_cross, x, cfg.norm_first), memory, memory_mask, positions


def _by_head(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[batch, seq, d_model]`` → ``[batch, heads, seq, d_k]``; head ``h`` owns features ``h·d_k … (h+1)·d_k − 1``
    (as :class:`~model.attention.MultiHeadAttention` splits them)."""
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


@torch.inference_mode()
def live_numbers(model: Transformer, src_ids, tgt_ids, kind: str, layer: int, head: int) -> dict[str, torch.Tensor]:
    """The live worked example's ``x_q``, ``x_kv``, ``q``, ``k``, ``v``, ``weights`` of one head, the layers before
    the module re-run by hand."""
    module, x_q, x_kv, mask, positions = _module_inputs(model, src_ids, tgt_ids, kind, layer)
    q, k, v = (
        _by_head(p(x), module.n_heads) for p, x in ((module.q_proj, x_q), (module.k_proj, x_kv), (module.v_proj, x_kv))
    )
    if module.position == "rope":
        q, k = rope_rotate(q, positions), rope_rotate(k, positions)
    bias = None
    if module.position == "alibi":
        bias = alibi_bias(module.slopes, positions, torch.arange(k.size(2), device=k.device)).to(q.dtype)
    weights = scaled_dot_product_weights(q, k, mask, bias)
    return {
        "x_q": x_q[0],
        "x_kv": x_kv[0],
        "q": q[0, head],
        "k": k[0, head],
        "v": v[0, head],
        "weights": weights[0, head],
    }


@torch.inference_mode()
def lens_stepwise(model: Transformer, src_ids, prefix, generated) -> list[torch.Tensor]:
    """The logit lens as a decoding runs: one decoder step per token with the KV cache; per step the
    ``[layers, vocab]`` log-probabilities of every layer's stream at the newest position."""
    memory = memory_mask = None
    if model.cfg.is_encoder_decoder:
        src = torch.tensor([list(src_ids)])
        memory, memory_mask = model.encode(src)[0], model.src_mask(torch.tensor([list(src_ids)]))
    cache, recorder = model.new_cache(), Recorder()
    tokens, steps = list(prefix), []
    for token in generated:
        recorder.clear()
        model.decode(torch.tensor([tokens[cache.positions :]]), memory, memory_mask, cache=cache, recorder=recorder)
        streams = torch.stack([x[0, -1] for x in recorder.streams["decoder"][1:]])
        steps.append(lens_log_probs(model, streams))
        tokens.append(int(token))
    return steps


@torch.inference_mode()
def last_query_reading(model: Transformer, src_ids, prefix_ids) -> dict[str, list[torch.Tensor]]:
    """Per decoder layer, the last query's self- and cross-attention weights ``[heads, k_len]``, their weighted
    transformed values ``α f(x)`` ``[heads, k_len, d_model]``, and the next-token probabilities ``[vocab]``, from a
    pass run layer by layer."""
    tgt = torch.tensor([list(prefix_ids)])
    memory = memory_mask = None
    if src_ids:
        src = torch.tensor([list(src_ids)])
        memory, memory_mask = model.encode(src)[0], model.src_mask(src)
    x, causal = model.embed_tokens(tgt), model.tgt_mask(tgt)
    where = torch.arange(tgt.size(1))
    out: dict[str, list[torch.Tensor]] = {"self_w": [], "self_v": [], "cross_w": [], "cross_v": []}
    for layer in model.decoder_layers:
        self_in = layer.res_self.norm(x) if layer.res_self.norm_first else x
        x, w_self, w_cross = layer(x, causal, memory, memory_mask, trace=True, positions=where)
        out["self_w"].append(w_self[0, :, -1])
        out["self_v"].append(weighted_values(layer.self_attn, w_self[0, :, -1], self_in[0]))
        if w_cross is not None:
            out["cross_w"].append(w_cross[0, :, -1])
            out["cross_v"].append(weighted_values(layer.cross_attn, w_cross[0, :, -1], memory[0]))
    if model.decoder_norm is not None:
        x = model.decoder_norm(x)
    out["probs"] = [torch.softmax(model.next_token_logits(x[0, -1]).float(), dim=-1)]
    return out
