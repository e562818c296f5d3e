"""The layers of the Transformer (Vaswani et al. 2017, §3.1): the position-wise feed-forward network (eq. 2), the
residual sub-layer connection, and the encoder and decoder layers built from them.

Encoder layer: self-attention → FFN. Decoder layer: masked self-attention → cross-attention (queries from the decoder,
keys/values from the encoder output ``memory``) → FFN. Post-LN (paper): ``x = LayerNorm(x + Dropout(Sublayer(x)))``;
pre-LN (Xiong et al. 2020): ``x = x + Dropout(Sublayer(LayerNorm(x)))``, the stack ending in a LayerNorm
(:class:`model.transformer.Transformer`). Shapes: ``[batch, len, d_model]`` in and out of every layer.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from model.attention import MultiHeadAttention
from model.config import ModelConfig

#: ``ModelConfig.activation`` → function. ``gelu_tanh`` is GPT-2's ``gelu_new``,
#: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (Hendrycks & Gimpel 2016, §2);
#: ``silu`` is x·σ(x), Marian's ``swish``.
ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
}


class FeedForward(nn.Module):
    """Position-wise FFN(x) = act(x W₁ + b₁) W₂ + b₂, ``act`` = ReLU in the paper (eq. 2);
    ``[.., d_model] → [.., d_model]``. ``activation``: a key of :data:`ACTIVATION_FUNCTIONS`."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.act = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.act(self.linear1(x))))


class _Residual(nn.Module):
    """One sub-layer connection with its LayerNorm, post-LN or pre-LN."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``sublayer(h) -> (out, weights)``; returns the new residual stream and the weights."""
        if self.norm_first:
            out, weights = sublayer(self.norm(x))
            return x + self.dropout(out), weights
        out, weights = sublayer(x)
        return self.norm(x + self.dropout(out)), weights


def residual(cfg: ModelConfig) -> _Residual:
    """A sub-layer connection as ``cfg`` describes it (dropout, pre-/post-LN, LayerNorm ε)."""
    return _Residual(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.norm_eps)


def feed_forward(cfg: ModelConfig) -> FeedForward:
    """The position-wise FFN as ``cfg`` describes it (widths, inner dropout, activation)."""
    return FeedForward(cfg.d_model, cfg.d_ff, cfg.ffn_dropout, cfg.activation)


def relative_position(cfg: ModelConfig) -> str | None:
    """The scheme applied inside self-attention (``"rope"`` / ``"alibi"``), or ``None`` for additive/no encodings."""
    return cfg.pos_encoding if cfg.pos_encoding in ("rope", "alibi") else None


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, relative_position(cfg))
        self.ffn = feed_forward(cfg)
        self.res_attn = residual(cfg)
        self.res_ffn = residual(cfg)

    def forward(self, x, mask, trace=False, head_mask=None, positions=None, record=None):
        """``x``: ``[batch, src_len, d_model]``; returns ``(x, weights [batch, heads, src_len, src_len] | None)``.
        ``record``: the self-attention's callback (:class:`~model.recorder.Recorder`)."""
        x, w = self.res_attn(
            x,
            lambda h: self.self_attn(h, h, mask, trace=trace, head_mask=head_mask, positions=positions, record=record),
        )
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x, w


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, relative_position(cfg))
        self.res_self = residual(cfg)
        self.cross_attn = None
        if cfg.is_encoder_decoder:
            self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
            self.res_cross = residual(cfg)
        self.ffn = feed_forward(cfg)
        self.res_ffn = residual(cfg)

    def forward(
        self,
        x,
        self_mask,
        memory=None,
        memory_mask=None,
        *,
        self_cache=None,
        cross_cache=None,
        trace=False,
        self_head_mask=None,
        cross_head_mask=None,
        positions=None,
        self_record=None,
        cross_record=None,
    ):
        """``x``: ``[batch, tgt_len, d_model]``, ``memory``: ``[batch, src_len, d_model]``; ``self_record`` /
        ``cross_record``: the attention modules' callbacks (:class:`~model.recorder.Recorder`).

        Returns ``(x, self_weights [batch, heads, tgt_len, k_len] | None,
        cross_weights [.., tgt_len, src_len] | None)``.
        """
        x, w_self = self.res_self(
            x,
            lambda h: self.self_attn(
                h,
                h,
                self_mask,
                cache=self_cache,
                trace=trace,
                head_mask=self_head_mask,
                positions=positions,
                record=self_record,
            ),
        )
        w_cross = None
        if self.cross_attn is not None:
            x, w_cross = self.res_cross(
                x,
                lambda h: self.cross_attn(
                    h,
                    memory,
                    memory_mask,
                    cache=cross_cache,
                    static_kv=True,
                    trace=trace,
                    head_mask=cross_head_mask,
                    record=cross_record,
                ),
            )
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x, w_self, w_cross
