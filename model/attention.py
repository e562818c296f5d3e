"""Multi-head scaled dot-product attention with a fast path, a traced path and a KV cache.

Vaswani et al. (2017), eq. (1) and §3.2.2::

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V          (softmax over the key axis: each query row sums to 1)
    MultiHead(Q, K, V) = Concat(head_1, …, head_h) Wᴼ,   head_i = Attention(Q W_iᵠ, K W_iᴷ, V W_iⱽ)

Masks are boolean and broadcast to ``[batch, heads, q_len, k_len]``; ``True`` means *the query may
attend to that key*. Rows = queries, columns = keys, everywhere in this project.

Relative position schemes act inside self-attention:

* RoPE (Su et al. 2021, eq. 34): query and key pairs ``(x_{2i}, x_{2i+1})`` are rotated by the angle
  ``pos · θ_i`` with ``θ_i = base^(−2i/d_k)``, so that ``q·k`` depends only on the offset between them;
  keys are rotated before they enter the KV cache.
* ALiBi (Press et al. 2021, §3): ``−m_h · |i − j|`` is added to the scores of head h, with slopes
  ``m_h = 2^(−8h/H)`` for ``h = 1 … H``; no parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from model.recorder import AttentionRecord


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
        if self.k is None or self.v is None:
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def truncate(self, positions: int) -> None:
        """Keep the first ``positions`` rows (used to step back in decoding)."""
        if self.k is not None and self.v is not None:
            self.k = self.k[:, :, :positions]
            self.v = self.v[:, :, :positions]

    def select(self, index: torch.Tensor) -> None:
        """Reorder / repeat the batch rows (beam search)."""
        if self.k is not None and self.v is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


def rope_rotate(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, eq. 34) of ``x [..., seq, d_k]`` at ``positions [seq]``.

    Each pair ``(x_{2i}, x_{2i+1})`` is rotated by ``positions · base^(−2i/d_k)``. Raises ``ValueError`` for odd d_k.
    """
    d_k = x.size(-1)
    if d_k % 2:
        raise ValueError(f"RoPE needs an even d_k, got {d_k}")
    inv_freq = base ** (-torch.arange(0, d_k, 2, device=x.device, dtype=torch.float32) / d_k)  # [d_k/2]
    angle = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [seq, d_k/2]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi slopes ``m_h = 2^(−8h/H)``, ``h = 1 … H`` (Press et al. 2021, §3), ``[heads]``."""
    return torch.tensor([2.0 ** (-8.0 * h / n_heads) for h in range(1, n_heads + 1)])


def alibi_bias(slopes: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """``−m_h · |i − j|`` as ``[heads, q_len, k_len]`` for query positions i and key positions j."""
    distance = (q_positions[:, None] - k_positions[None, :]).abs().to(slopes.dtype)
    return -slopes[:, None, None] * distance[None]


def scaled_dot_product_weights(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``softmax(q kᵀ / √d_k + bias)`` with masked keys at exactly zero weight (paper eq. 1).

    Args:
        q: ``[..., q_len, d_k]``; k: ``[..., k_len, d_k]``; mask: bool, broadcastable to ``[..., q_len, k_len]``;
        bias: added to the scores (ALiBi), broadcastable likewise.

    Returns:
        Weights ``[..., q_len, k_len]``; every row sums to 1 (unless the mask hides all its keys).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if bias is not None:
        scores = scores + bias
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

    slopes: torch.Tensor  # ALiBi's buffer (registered only then): nn.Module types its attributes as Tensor | Module

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, position: str | None = None):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if position not in (None, "rope", "alibi"):
            raise ValueError(f"position must be None, 'rope' or 'alibi', got {position!r}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.position = position
        if position == "rope" and self.d_k % 2:
            raise ValueError(f"RoPE needs an even d_k, got {self.d_k}")
        if position == "alibi":
            self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)
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
        positions: torch.Tensor | None = None,
        record: Callable[[AttentionRecord], None] | None = None,
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
            positions: absolute positions of the queries ``[q_len]`` (RoPE and ALiBi self-attention only; the
                new keys sit at the same positions and the cached keys at ``0 … offset − 1``).
            record: with ``trace``, called with an :class:`~model.recorder.AttentionRecord` of this pass.

        Returns:
            ``(output [batch, q_len, d_model], weights [batch, heads, q_len, k_len] or None)``.
        """
        if record is not None and not trace:
            raise ValueError("record needs the traced path (trace=True)")
        q = q_raw = self._split(self.q_proj(x_q))
        k_raw = None
        if self.position is not None and positions is None:
            raise ValueError(f"{self.position} attention needs the query positions")
        rope_at = positions if self.position == "rope" else None
        alibi_at = positions if self.position == "alibi" else None
        if rope_at is not None:
            q = rope_rotate(q, rope_at)
        if cache is not None and static_kv and cache.k is not None and cache.v is not None:
            k, v = cache.k, cache.v
        else:
            if x_kv is None:
                raise ValueError("x_kv is required unless the static cache is filled")
            k, v = self._split(self.k_proj(x_kv)), self._split(self.v_proj(x_kv))
            k_raw = k
            if rope_at is not None:
                k = rope_rotate(k, rope_at)  # rotated once, before caching
            if cache is not None:
                if not static_kv and cache.k is not None and cache.v is not None:
                    k = torch.cat([cache.k, k], dim=2)
                    v = torch.cat([cache.v, v], dim=2)
                cache.k, cache.v = k, v

        bias = None
        if alibi_at is not None:
            bias = alibi_bias(self.slopes, alibi_at, torch.arange(k.size(2), device=k.device)).to(q.dtype)
        weights = None
        if trace:
            weights = scaled_dot_product_weights(q, k, mask, bias)
            drop = F.dropout(weights, self.dropout, self.training) if self.dropout else weights
            out = drop @ v
        else:
            attn_mask = mask
            if bias is not None:  # SDPA takes one float mask: the bias, with -inf where the bool mask forbids
                attn_mask = bias[None] if mask is None else bias[None].masked_fill(~mask, float("-inf"))
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.0
            )
        if head_mask is not None:
            out = out * head_mask.view(1, -1, 1, 1).to(out.dtype)
        heads = out
        b, _, t, _ = out.shape
        out = self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_model))
        if record is not None and weights is not None:  # record needs trace, which sets the weights
            record(
                AttentionRecord(
                    x_q, x_kv, mask, positions, q_raw, k if k_raw is None else k_raw, q, k, v, bias, weights, heads, out
                )
            )
        return out, weights
