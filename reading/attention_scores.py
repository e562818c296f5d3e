"""What the attention of one step gives each token: the raw weights, and the weights times the transformed values.

Raw weights are the traced path's softmax (``model/attention.py``, paper eq. 1), the last query row: cross-attention
over the source, decoder (or a decoder-only model's) self-attention over the prefix.

Norm-based analysis (Kobayashi et al. 2020, "Attention is Not Only a Weight", eq. 5–7): a head's output for query
i is ``Σ_j α_ij f(x_j) + b_O`` with ``f(x) = (x W_V + b_V) W_O`` restricted to that head's rows of ``W_O``, so token
j's share of it is the vector ``α_ij f(x_j)``, and its size ``‖α_ij f(x_j)‖`` (= α_ij ‖f(x_j)‖, as α ≥ 0) says
what the head took from j; a small weight on a long value can matter more than a large weight on a short one.
The heads of a layer together (eq. 8) give ``‖Σ_h α^h_ij f^h(x_j)‖``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.attention import MultiHeadAttention
from model.transformer import Transformer
from reading.step import Step, TokenScores, frozen_array
from reading.trace import ModuleTrace, Trace, attention_module, trace_pair


def transformed_values(module: MultiHeadAttention, x_kv: torch.Tensor) -> torch.Tensor:
    """``f^h(x_j) = (x_j W_V + b_V)_h W_O^h`` for every head h and key j (Kobayashi et al. 2020, eq. 6).

    Args:
        module: the attention module; x_kv: what its keys and values are computed from, ``[k_len, d_model]``
            (for a pre-LN layer: after the sub-layer's LayerNorm; cross-attention: the encoder output).

    Returns:
        ``[heads, k_len, d_model]``; ``Σ_h Σ_j α^h_ij f^h(x_j) + b_O`` is the module's output for query i.
    """
    v = module.v_proj(x_kv).view(-1, module.n_heads, module.d_k).transpose(0, 1)  # [heads, k_len, d_k]
    return through_output(module, v)


def through_output(module: MultiHeadAttention, per_head: torch.Tensor) -> torch.Tensor:
    """Each head's vectors ``[heads, n, d_k]`` through its rows of Wᴼ: ``[heads, n, d_model]`` (no bias). For the
    values ``v_j`` this is ``f^h(x_j)``; for a head's output ``Σ_j α_ij v_j``, its share of the module's output."""
    h, d_k = module.n_heads, module.d_k
    w_o = module.out_proj.weight.view(module.d_model, h, d_k).permute(1, 2, 0)  # [heads, d_k, d_model]
    return per_head.to(w_o.dtype) @ w_o


def weighted_values(module: MultiHeadAttention, weights: torch.Tensor, x_kv: torch.Tensor) -> torch.Tensor:
    """``α^h_ij f^h(x_j)`` for one query row: ``weights [heads, k_len]``, ``x_kv [k_len, d_model]`` →
    ``[heads, k_len, d_model]`` (eq. 7: summed over keys and heads, plus ``b_O``, it is the attention output)."""
    return weights[..., None] * transformed_values(module, x_kv)


@dataclass(frozen=True)
class AttentionReading:
    """The last prefix position's attention in every layer, per head, read two ways.

    Attributes:
        source_weights: ``(layers, heads, S)`` cross-attention weights (``(0, 0, 0)`` for a decoder-only model).
        prefix_weights: ``(layers, heads, T)`` decoder self-attention weights.
        source_norms / prefix_norms: ``(layers, heads, S or T)`` per head ``‖α_ij f^h(x_j)‖``.
        source_layer_norms / prefix_layer_norms: ``(layers, S or T)`` the heads together, ``‖Σ_h α^h_ij f^h(x_j)‖``.
    The norms are in the units of the residual stream (the sub-layer's output before the residual sum).
    """

    source_weights: np.ndarray
    prefix_weights: np.ndarray
    source_norms: np.ndarray
    prefix_norms: np.ndarray
    source_layer_norms: np.ndarray
    prefix_layer_norms: np.ndarray

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, frozen_array(getattr(self, name)))

    def weights(self, layer: int | None = None, head: int | None = None) -> TokenScores:
        """Raw attention of ``layer`` (``None``: the mean over layers) and ``head`` (``None``: the mean over heads).

        Raises:
            IndexError: ``layer`` or ``head`` out of range.
        """
        pick = lambda w: _select(w, layer, head).mean(axis=(0, 1))  # noqa: E731
        return TokenScores("attention", pick(self.source_weights), pick(self.prefix_weights))

    def norms(self, layer: int | None = None, head: int | None = None) -> TokenScores:
        """``‖α f(x)‖`` of ``layer`` (``None``: the mean over layers) and ``head`` (``None``: the layer's heads
        together, ``‖Σ_h α^h f^h(x)‖``, eq. 8). Raises ``IndexError`` for ``layer`` or ``head`` out of range."""
        if head is None:
            pick = lambda n: _select(n[:, None], layer, None).mean(axis=(0, 1))  # noqa: E731
            return TokenScores("value_norm", pick(self.source_layer_norms), pick(self.prefix_layer_norms))
        pick = lambda n: _select(n, layer, head).mean(axis=(0, 1))  # noqa: E731
        return TokenScores("value_norm", pick(self.source_norms), pick(self.prefix_norms))


def _select(values: np.ndarray, layer: int | None, head: int | None) -> np.ndarray:
    """``(layers, heads, n)`` cut to one layer and/or head, keeping the two leading axes."""
    for axis, index in ((0, layer), (1, head)):
        if index is not None:
            if not -values.shape[axis] <= index < values.shape[axis]:
                raise IndexError(f"{('layer', 'head')[axis]} {index} out of range ({values.shape[axis]})")
            values = np.take(values, [index], axis=axis)
    return values


@torch.inference_mode()
def read_attention(model: Transformer, step: Step, trace: Trace | None = None) -> AttentionReading:
    """The last prefix position's attention weights and value norms in every decoder layer, read from the step's
    trace (:func:`reading.trace.trace_pair`: its weights and each module's recorded values ``v``).

    Args:
        trace: the trace of ``step.src_ids`` / ``step.prefix_ids`` when the caller has it; else one is made.

    Raises:
        ValueError: the step does not fit the model (:meth:`Step.check`).
    """
    step.check(model)
    if trace is None:
        trace = trace_pair(model, None, list(step.src_ids) or None, list(step.prefix_ids))
    parts: dict[str, list] = {k: [] for k in ("sw", "pw", "sn", "pn", "sl", "pl")}
    self_kind = model.cfg.decoder_self_kind
    for i in range(len(model.decoder_layers)):
        _collect(parts, "p", attention_module(model, self_kind, i), trace.module(self_kind, i))
        if model.cfg.is_encoder_decoder:  # the decoder's layers have cross-attention
            _collect(parts, "s", attention_module(model, "cross", i), trace.module("cross", i))
    n_layers, n_heads = len(model.decoder_layers), model.cfg.n_heads
    empty = np.zeros((n_layers, n_heads, 0))
    stack = lambda key, fallback: np.stack(parts[key]) if parts[key] else fallback  # noqa: E731
    return AttentionReading(
        stack("sw", empty),
        stack("pw", empty),
        stack("sn", empty),
        stack("pn", empty),
        stack("sl", empty[:, 0]),
        stack("pl", empty[:, 0]),
    )


def _collect(parts: dict[str, list], side: str, module: MultiHeadAttention, m: ModuleTrace) -> None:
    """Append one layer's last-query weights ``[heads, k_len]``, per-head norms and heads-together norms for
    ``side``."""
    weights = m.weights[:, -1]
    vectors = weights[..., None] * through_output(module, m.v.to(module.out_proj.weight.device)).float().cpu()
    parts[side + "w"].append(weights.numpy())
    parts[side + "n"].append(vectors.norm(dim=-1).numpy())
    parts[side + "l"].append(vectors.sum(dim=0).norm(dim=-1).numpy())
