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

from .step import Step, TokenScores, frozen_array


def transformed_values(module: MultiHeadAttention, x_kv: torch.Tensor) -> torch.Tensor:
    """``f^h(x_j) = (x_j W_V + b_V)_h W_O^h`` for every head h and key j (Kobayashi et al. 2020, eq. 6).

    Args:
        module: the attention module; x_kv: what its keys and values are computed from, ``[k_len, d_model]``
            (for a pre-LN layer: after the sub-layer's LayerNorm; cross-attention: the encoder output).

    Returns:
        ``[heads, k_len, d_model]``; ``Σ_h Σ_j α^h_ij f^h(x_j) + b_O`` is the module's output for query i.
    """
    h, d_k = module.n_heads, module.d_k
    v = module.v_proj(x_kv).view(-1, h, d_k).transpose(0, 1)  # [heads, k_len, d_k]
    w_o = module.out_proj.weight.view(module.d_model, h, d_k).permute(1, 2, 0)  # [heads, d_k, d_model]
    return v @ w_o


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
def read_attention(model: Transformer, step: Step) -> AttentionReading:
    """The last prefix position's attention weights and value norms in every decoder layer.

    One traced pass (the explicit-softmax path, the same as :func:`model.trace.trace_pair`, tested equal), layer by
    layer so that each self-attention's input is at hand for its values; nothing of ``model`` is changed.

    Raises:
        ValueError: the step does not fit the model (:meth:`Step.check`).
    """
    step.check(model)
    src, tgt = step.tensors(model)
    memory = memory_mask = None
    if src is not None:
        memory, _ = model.encode(src)
        memory_mask = model.src_mask(src)
    x = model.embed_tokens(tgt)
    mask, positions = model.tgt_mask(tgt), torch.arange(tgt.size(1), device=tgt.device)
    parts: dict[str, list] = {k: [] for k in ("sw", "pw", "sn", "pn", "sl", "pl")}
    for layer in model.decoder_layers:
        self_in = layer.res_self.norm(x) if layer.res_self.norm_first else x
        x, w_self, w_cross = layer(x, mask, memory, memory_mask, trace=True, positions=positions)
        _collect(parts, "p", layer.self_attn, w_self[0, :, -1], self_in[0])
        if w_cross is not None:
            _collect(parts, "s", layer.cross_attn, w_cross[0, :, -1], memory[0])
    n_layers, n_heads = len(model.decoder_layers), model.cfg.n_heads
    empty = np.zeros((n_layers, n_heads, 0))
    stack = lambda key, fallback: np.stack(parts[key]) if parts[key] else fallback  # noqa: E731
    return AttentionReading(stack("sw", empty), stack("pw", empty), stack("sn", empty), stack("pn", empty),
                            stack("sl", empty[:, 0]), stack("pl", empty[:, 0]))


def _collect(parts: dict[str, list], side: str, module: MultiHeadAttention, weights: torch.Tensor,
             x_kv: torch.Tensor) -> None:
    """Append one layer's weights ``[heads, k_len]``, per-head norms and heads-together norms for ``side``."""
    vectors = weighted_values(module, weights, x_kv).float()  # [heads, k_len, d_model]
    parts[side + "w"].append(weights.float().cpu().numpy())
    parts[side + "n"].append(vectors.norm(dim=-1).cpu().numpy())
    parts[side + "l"].append(vectors.sum(dim=0).norm(dim=-1).cpu().numpy())
