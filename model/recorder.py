"""What one traced forward pass computed, handed to the caller instead of kept on the model.

:meth:`model.transformer.Transformer.encode` and ``decode`` take a :class:`Recorder` as an argument: every attention
module then reports what it read and computed (an :class:`AttentionRecord`), and every layer its output stream. The
recorder belongs to one call. Nothing is registered on the model: the model is shared by the threads of every
visitor, and a forward hook on it would record their passes too.

Reading these records (the heatmaps, the query·key view, the logit lens, the live numbers, attribution) is the job of
``reading/``; this module only carries them out of the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass(frozen=True, eq=False)  # tensors inside: compared by identity
class AttentionRecord:
    """One attention module's forward pass (Vaswani et al. 2017, eq. 1 and §3.2.2), batch axis kept.

    Attributes:
        x_q: ``[batch, q_len, d_model]`` what the queries are projected from (after the sub-layer's LayerNorm in a
            pre-LN model). x_kv: ``[batch, k_len, d_model]`` what the keys and values are projected from (the
            encoder output ``memory`` in cross-attention); ``None`` when they came from a filled KV cache.
        mask: bool, broadcastable to ``[batch, heads, q_len, k_len]`` (``True`` = may attend), or ``None``.
        positions: ``[q_len]`` the queries' absolute positions (self-attention), or ``None``.
        q_raw / k_raw: ``[batch, heads, q_len | k_len, d_k]`` the projections before RoPE's rotation (the same tensors
            as ``q`` / ``k`` without RoPE; with RoPE and a KV cache, ``k_raw`` holds the new keys only).
        q / k / v: ``[batch, heads, q_len | k_len, d_k]`` as they enter the score (``k``, ``v``: every key, cached ones
            included).
        bias: ``[heads, q_len, k_len]`` ALiBi's ``−m_h·|i − j|``, or ``None``.
        weights: ``[batch, heads, q_len, k_len]`` the softmax (the heatmap).
        heads: ``[batch, heads, q_len, d_k]`` each head's ``Σ_j w_ij v_j`` (after the head mask), before Wᴼ.
        output: ``[batch, q_len, d_model]`` the module's output, ``Concat(heads) Wᴼ + bᴼ``.
    """

    x_q: torch.Tensor
    x_kv: torch.Tensor | None
    mask: torch.Tensor | None
    positions: torch.Tensor | None
    q_raw: torch.Tensor
    k_raw: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: torch.Tensor | None
    weights: torch.Tensor
    heads: torch.Tensor
    output: torch.Tensor


@dataclass
class Recorder:
    """The records of one traced pass; create one per call.

    Attributes:
        modules: record every attention module (the traced path, explicit softmax); ``False``: the streams alone,
            on the fast path the decoding takes (the logit lens reads nothing else).
        attention: ``(kind, layer) → AttentionRecord`` (kinds as :mod:`model.config` names them: ``encoder``,
            ``decoder``, ``cross``, or ``self`` for a decoder-only model; layers 0-based). A module run twice in one
            recorder (a cached decoding step after step) keeps its last record.
        streams: ``"encoder"`` / ``"decoder"`` → the residual stream entering the first layer (embeddings ×√d_model
            plus positions), then after each layer: ``layers + 1`` tensors ``[batch, seq, d_model]``, before any final
            LayerNorm. A second pass through the same recorder appends after the first: call :meth:`clear` between.
    """

    modules: bool = True
    attention: dict[tuple[str, int], AttentionRecord] = field(default_factory=dict)
    streams: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def sink(self, kind: str, layer: int) -> Callable[[AttentionRecord], None]:
        """The callback the attention module ``kind`` of ``layer`` reports to."""

        def keep(record: AttentionRecord) -> None:
            self.attention[(kind, layer)] = record

        return keep

    def stream(self, side: str, x: torch.Tensor) -> None:
        """Append ``x [batch, seq, d_model]`` to the residual streams of ``side`` (``encoder`` / ``decoder``)."""
        self.streams.setdefault(side, []).append(x)

    def clear(self) -> None:
        self.attention.clear()
        self.streams.clear()


def sink_of(recorder: Recorder | None, kind: str, layer: int) -> Callable[[AttentionRecord], None] | None:
    """``recorder.sink(kind, layer)``, or ``None`` without a recorder or with one of the streams alone."""
    return None if recorder is None or not recorder.modules else recorder.sink(kind, layer)
