"""Multi-head scaled dot-product attention with a fast path, a traced path and a KV cache.

Vaswani et al. (2017), eq. (1) and §3.2.2::

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V          (softmax over the key axis: each query row sums to 1)
    MultiHead(Q, K, V) = Concat(head_1, …, head_h) Wᴼ,   head_i = Attention(Q W_iᵠ, K W_iᴷ, V W_iⱽ)

Masks are boolean and broadcast to ``[batch, heads, q_len, k_len]``; ``True`` means *the query may
attend to that key*. Rows = queries, columns = keys, everywhere in this project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LayerKV:
    """Cached keys and values of one attention module, each ``[batch, heads, positions, d_k]``."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    @property
    def positions(self) -> int:
        return 0 if self.k is None else self.k.size(2)

    def nbytes(self) -> int:
        """Bytes held by K and V together."""
        if self.k is None:
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def truncate(self, positions: int) -> None:
        """Keep the first ``positions`` rows (used to step back in decoding)."""
        if self.k is not None:
            self.k = self.k[:, :, :positions]
            self.v = self.v[:, :, :positions]

    def select(self, index: torch.Tensor) -> None:
        """Reorder / repeat the batch rows (beam search)."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


def scaled_dot_product_weights(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """``softmax(q kᵀ / √d_k)`` with masked keys at exactly zero weight (paper eq. 1).

    Args:
        q: ``[..., q_len, d_k]``; k: ``[..., k_len, d_k]``; mask: bool, broadcastable to ``[..., q_len, k_len]``.

    Returns:
        Weights ``[..., q_len, k_len]``; every row sums to 1 (unless the mask hides all its keys).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (paper §3.2.2) with the parameter layout of ``torch.nn.MultiheadAttention``.

    Args:
        d_model: model width; n_heads: number of heads h (``d_k = d_model / h``); dropout: on the weights.

    Two paths give the same result (tested):

    * fast (``trace=False``): ``F.scaled_dot_product_attention``, used for training and plain decoding;
    * traced (``trace=True``): the explicit softmax, which also returns the weights ``[batch, heads, q_len, k_len]``.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, seq, d_model]`` → ``[batch, heads, seq, d_k]``."""
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)

    def forward(
        self,
        x_q: torch.Tensor,
        x_kv: torch.Tensor | None,
        mask: torch.Tensor | None = None,
        *,
        cache: LayerKV | None = None,
        static_kv: bool = False,
        trace: bool = False,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x_q`` to ``x_kv``.

        Args:
            x_q: queries ``[batch, q_len, d_model]``.
            x_kv: keys/values source ``[batch, k_len, d_model]``; may be ``None`` when ``static_kv`` and the
                cache is already filled (cross-attention after the first decoding step).
            mask: bool, broadcastable to ``[batch, heads, q_len, k_len_total]``; ``True`` = may attend.
            cache: when given, self-attention appends the new K/V rows to it and attends over all cached rows;
                with ``static_kv`` (cross-attention) K/V are computed once from ``x_kv`` and reused.
            trace: use the explicit softmax and return the weights.
            head_mask: ``[heads]`` multipliers of each head's output before Wᴼ (0 ablates a head).

        Returns:
            ``(output [batch, q_len, d_model], weights [batch, heads, q_len, k_len] or None)``.
        """
        q = self._split(self.q_proj(x_q))
        if cache is not None and static_kv and cache.k is not None:
            k, v = cache.k, cache.v
        else:
            if x_kv is None:
                raise ValueError("x_kv is required unless the static cache is filled")
            k, v = self._split(self.k_proj(x_kv)), self._split(self.v_proj(x_kv))
            if cache is not None:
                if not static_kv and cache.k is not None:
                    k = torch.cat([cache.k, k], dim=2)
                    v = torch.cat([cache.v, v], dim=2)
                cache.k, cache.v = k, v

        weights = None
        if trace:
            weights = scaled_dot_product_weights(q, k, mask)
            drop = F.dropout(weights, self.dropout, self.training) if self.dropout else weights
            out = drop @ v
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
            )
        if head_mask is not None:
            out = out * head_mask.view(1, -1, 1, 1).to(out.dtype)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.d_model)
        return self.out_proj(out), weights
