"""Positional encodings added to the token embeddings.

Sinusoidal: Vaswani et al. (2017), §3.5::

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

(base 10000; some articles misprint it as 1000). Marian (``MarianSinusoidalPositionalEmbedding`` in
``transformers``) uses the same angles with the layout ``"halves"``: ``PE(pos, i) = sin(pos / 10000^(2i / d_model))``
and ``PE(pos, d_model/2 + i) = cos(…)`` for ``i < d_model/2``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_table(
    max_len: int, d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float32, layout: str = "interleaved"
) -> torch.Tensor:
    """The sinusoidal table ``[max_len, d_model]`` (computed in float64, returned as ``dtype``), paper §3.5.

    ``layout``: ``"interleaved"`` (paper: sin in even, cos in odd dimensions) or ``"halves"`` (Marian: sines in the
    first half of the dimensions, cosines in the second).

    Raises:
        ValueError: ``d_model`` is odd, a size is not positive, or ``layout`` is unknown.
    """
    if layout not in ("interleaved", "halves"):
        raise ValueError(f"layout must be 'interleaved' or 'halves', got {layout!r}")
    if d_model <= 0 or max_len <= 0:
        raise ValueError("max_len and d_model must be positive")
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal encodings, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # [max_len, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # [d_model/2]
    angle = pos / torch.pow(torch.tensor(base, dtype=torch.float64), two_i / d_model)
    if layout == "halves":
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).to(dtype)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.to(dtype)


class PositionalEncoding(nn.Module):
    """Adds a position signal to embeddings: ``x[b, t] + PE[offset + t]``.

    Args:
        kind: ``"sinusoidal"`` (fixed buffer), ``"learned"`` (trainable table), or ``"none"`` / ``"rope"`` /
            ``"alibi"`` (nothing added here: RoPE and ALiBi act inside self-attention).
        max_len: number of positions.
        d_model: embedding width.
        layout: the sinusoidal table's layout (:func:`sinusoidal_table`).
    """

    def __init__(self, kind: str, max_len: int, d_model: int, layout: str = "interleaved"):
        super().__init__()
        self.kind = kind
        self.table: torch.Tensor | None
        if kind == "sinusoidal":
            self.register_buffer("table", sinusoidal_table(max_len, d_model, layout=layout), persistent=False)
        elif kind == "learned":
            self.table = nn.Parameter(torch.randn(max_len, d_model) * (1.0 / math.sqrt(d_model)))
        elif kind in ("none", "rope", "alibi"):
            self.table = None
        else:
            raise ValueError(f"unsupported positional encoding {kind!r}")

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``x``: ``[batch, seq, d_model]``; ``offset``: position of ``x[:, 0]`` (for cached decoding)."""
        if self.table is None:
            return x
        seq = x.size(1)
        if offset + seq > self.table.size(0):
            raise ValueError(f"sequence of {offset + seq} positions exceeds max_len {self.table.size(0)}")
        return x + self.table[offset : offset + seq].to(x.dtype)
