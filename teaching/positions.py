"""The numbers the Positional page draws, computed with the model's own code (no second copy of the formulas).

* Sinusoidal table (Vaswani et al. 2017, §3.5): :func:`teaching.worked.sinusoidal`.
* RoPE (Su et al. 2021): the angle by which the model's :func:`model.attention.rope_rotate` turns pair ``i`` at
  position ``pos`` (``θ = pos · base^(−2i/d_k)``), read off by rotating unit vectors.
* ALiBi (Press et al. 2021, §3): the slopes ``m_h`` held by the loaded model's attention layers and the bias
  ``−m_h · |i − j|`` from :func:`model.attention.alibi_bias`.

NumPy arrays out (float64), for :mod:`charts.teaching` to draw. No Streamlit.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from model.attention import MultiHeadAttention, alibi_bias, alibi_slopes, rope_rotate


def similarity(table) -> np.ndarray:
    """``table @ tableᵀ``: ``[positions, positions]`` dot products of the position vectors ``table [positions, d]``."""
    table = np.asarray(table, dtype=float)
    return table @ table.T


def rope_angles(n_pos: int, d_k: int) -> np.ndarray:
    """The rotation angle of each pair, as :func:`model.attention.rope_rotate` applies it: ``[n_pos, d_k/2]``,
    radians in ``[0, 2π)``.

    Rotates the unit vector ``(1, 0)`` of every pair at positions ``0 … n_pos−1`` and reads the angle back.
    Raises ``ValueError`` for a non-positive ``n_pos`` or an odd / non-positive ``d_k``.
    """
    if n_pos <= 0 or d_k <= 0 or d_k % 2:
        raise ValueError("n_pos must be positive and d_k even")
    unit = torch.zeros(n_pos, d_k, dtype=torch.float64)
    unit[:, 0::2] = 1.0
    turned = rope_rotate(unit, torch.arange(n_pos))  # [n_pos, d_k]: (cos θ, sin θ) per pair
    angle = torch.atan2(turned[:, 1::2], turned[:, 0::2]).numpy()
    return np.mod(angle, 2 * math.pi)


def attention_layers(model: torch.nn.Module, position: str) -> list[MultiHeadAttention]:
    """The model's attention modules that apply ``position`` (``"rope"`` or ``"alibi"``), in module order."""
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention) and m.position == position]


def model_alibi_slopes(model: torch.nn.Module, n_heads: int) -> np.ndarray:
    """The ALiBi slopes ``m_h`` of the loaded model's first ALiBi layer: ``[heads]``.

    Every layer holds the same slopes (they depend only on the number of heads); a model without an ALiBi layer
    gets :func:`model.attention.alibi_slopes` for ``n_heads``.
    """
    layers = attention_layers(model, "alibi")
    slopes = layers[0].slopes if layers else alibi_slopes(n_heads)
    return slopes.detach().double().cpu().numpy()


def alibi_bias_matrix(slope: float, n: int) -> np.ndarray:
    """ALiBi bias ``−m · |i − j|`` for queries ``i`` and keys ``j`` in ``0 … n−1``: ``[n, n]``."""
    positions = torch.arange(n)
    bias = alibi_bias(torch.tensor([float(slope)], dtype=torch.float64), positions, positions)[0]  # [n, n]
    return bias.numpy() + 0.0  # + 0.0: 0, not −0, on the diagonal


def position_signal_norms(model: torch.nn.Module, d_model: int) -> tuple[np.ndarray, np.ndarray] | None:
    """How loud the position signal is beside the tokens: ``(‖embedding · s‖ [vocab], ‖PE(pos)‖ [max_len])``.

    ``None`` for a model without a position table (RoPE, ALiBi, none). ``s`` is what the model multiplies its
    embeddings by before adding the table: ``√d_model`` (paper §3.4), or 1 for a model that adds them unscaled
    (``cfg.scale_embeddings`` off: GPT-2).
    """
    table = getattr(getattr(model, "pos", None), "table", None)
    if table is None:
        return None
    pe = table.detach().double().cpu().numpy()
    scale = math.sqrt(d_model) if getattr(getattr(model, "cfg", None), "scale_embeddings", True) else 1.0
    emb = model.get_parameter("embed.weight").detach().double().cpu().numpy() * scale
    return np.linalg.norm(emb, axis=1), np.linalg.norm(pe, axis=1)


#: The most cells of a model's position table the Positional page draws (GPT-2's is 1024 × 768: 786k cells, megabytes
#: of chart for a browser to draw), and the most positions of its similarity map.
MAX_TABLE_CELLS = 131_072
MAX_SIMILARITY_POSITIONS = 256


def drawn_rows(n_positions: int, d_model: int, max_cells: int = MAX_TABLE_CELLS) -> int:
    """How many of a table's first positions are drawn: all ``n_positions`` when ``n_positions × d_model`` fits
    ``max_cells``, else as many as fit (at least 16)."""
    return min(n_positions, max(16, max_cells // max(d_model, 1)))
