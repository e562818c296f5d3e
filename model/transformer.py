"""The Transformer of Vaswani et al. (2017), encoder-decoder or decoder-only, post-LN or pre-LN.

The stacks of encoder and decoder layers (:mod:`model.layers`, §3.1), the embeddings and positions, the masks, the
decoder's KV cache and the output projection; post-LN (the paper) or pre-LN (Xiong et al. 2020, with a final
LayerNorm after each stack).
Embeddings are multiplied by √d_model and shared with the output projection when tied (§3.4).
The variants of pretrained models (``ModelConfig.activation``, ``norm_eps``, ``scale_embeddings``, ``pos_layout``,
``logits_bias``, ``suppress_ids``) let Marian and GPT-2 weights run through these same modules (``model/hf/``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from model.attention import LayerKV
from model.config import ModelConfig
from model.layers import DecoderLayer, EncoderLayer
from model.positional import PositionalEncoding
from model.recorder import Recorder, sink_of


@dataclass
class KVCache:
    """Decoder K/V cache: per layer, self-attention rows (grow by one per step) and cross-attention (fixed)."""

    self_attn: list[LayerKV] = field(default_factory=list)
    cross_attn: list[LayerKV] = field(default_factory=list)

    @classmethod
    def empty(cls, n_layers: int, cross: bool) -> "KVCache":
        return cls([LayerKV() for _ in range(n_layers)], [LayerKV() for _ in range(n_layers)] if cross else [])

    @property
    def positions(self) -> int:
        """Target positions cached so far."""
        return self.self_attn[0].positions if self.self_attn else 0

    def nbytes(self) -> dict[str, int]:
        """Bytes held: ``{"self": …, "cross": …, "total": …}``."""
        s = sum(layer.nbytes() for layer in self.self_attn)
        c = sum(layer.nbytes() for layer in self.cross_attn)
        return {"self": s, "cross": c, "total": s + c}

    def truncate(self, positions: int) -> None:
        for layer in self.self_attn:
            layer.truncate(positions)

    def select(self, index: torch.Tensor) -> None:
        for layer in self.self_attn + self.cross_attn:
            layer.select(index)


@dataclass
class DecoderOutput:
    """Decoder result: ``hidden [batch, tgt_len, d_model]`` and per-layer weights when traced."""

    hidden: torch.Tensor
    self_weights: list[torch.Tensor]
    cross_weights: list[torch.Tensor]


def causal_mask(q_len: int, k_len: int, device=None) -> torch.Tensor:
    """Bool ``[q_len, k_len]``: query i (at absolute position ``k_len - q_len + i``) may see keys ``≤`` its position."""
    offset = k_len - q_len
    q_pos = torch.arange(q_len, device=device).unsqueeze(1) + offset
    return torch.arange(k_len, device=device).unsqueeze(0) <= q_pos


class Transformer(nn.Module):
    """Encoder-decoder (translation) or decoder-only (language model) Transformer.

    Args:
        cfg: the :class:`~model.config.ModelConfig`.

    Shapes: ``src`` ``[batch, src_len]`` and ``tgt`` ``[batch, tgt_len]`` token ids; ``logits``
    ``[batch, tgt_len, vocab]``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = PositionalEncoding(cfg.pos_encoding, cfg.max_len, cfg.d_model, cfg.pos_layout)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        n_enc = cfg.n_encoder_layers if cfg.is_encoder_decoder else 0
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(n_enc))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.encoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.norm_first and n_enc else None
        self.decoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.norm_first else None
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.logits_bias)
        self._reset_parameters()
        if cfg.tie_embeddings:
            self.generator.weight = self.embed.weight

    def _reset_parameters(self) -> None:
        """Xavier-uniform matrices (Glorot & Bengio 2010), zero biases, N(0, 1/d_model) embeddings.

        W_Q, W_K and W_V are initialised as the one ``[3·d_model, d_model]`` matrix that
        ``torch.nn.MultiheadAttention`` holds, i.e. with bound √(6 / (d_model + 3·d_model)): attention starts
        softer than with three separate Xavier matrices (scores half as large), which trained faster here.
        """
        for name, p in self.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
                bound = math.sqrt(6.0 / (p.size(1) + 3 * p.size(0)))
                nn.init.uniform_(p, -bound, bound)
            elif p.dim() > 1 and not name.startswith(("embed", "pos")):
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        # Embeddings are scaled by √d_model on the way in, so N(0, 1/d_model) gives unit-variance inputs.
        nn.init.normal_(self.embed.weight, std=self.cfg.d_model**-0.5)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @staticmethod
    def count_parameters(cfg: ModelConfig) -> int:
        """The weights a model of ``cfg`` would have (tied embeddings once), without building it: counted on the
        meta device (shapes only, no memory, no initialisation)."""
        with torch.device("meta"):
            return Transformer(cfg).num_parameters()

    def embed_tokens(
        self, ids: torch.Tensor, offset: int = 0, token_embeddings: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token embedding × √d_model (unless ``cfg.scale_embeddings`` is off) + positional encoding, with dropout;
        ``[batch, seq] → [batch, seq, d_model]``. ``token_embeddings`` ``[batch, seq, d_model]``: used instead of
        ``embed(ids)`` (attribution differentiates with respect to them, ``reading/``); the masks still come from
        ``ids``."""
        x = self.embed(ids) if token_embeddings is None else token_embeddings
        if self.cfg.scale_embeddings:
            x = x * math.sqrt(self.cfg.d_model)
        return self.emb_dropout(self.pos(x, offset))

    def src_mask(self, src: torch.Tensor) -> torch.Tensor:
        """Key-padding mask ``[batch, 1, 1, src_len]`` (True = real token)."""
        return (src != self.cfg.pad_id)[:, None, None, :]

    def tgt_mask(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Decoder self-attention mask ``[batch, 1, tgt_len, offset + tgt_len]`` (True = may attend): causal, and
        with ``offset == 0`` the keys equal to ``pad_id`` hidden, except position 0 (see :meth:`decode`)."""
        t = tgt.size(1)
        mask = causal_mask(t, offset + t, tgt.device)[None, None]
        if offset == 0:
            real = tgt != self.cfg.pad_id
            real[:, 0] = True
            mask = mask & real[:, None, None, :]
        return mask

    def encode(
        self,
        src: torch.Tensor,
        *,
        trace: bool = False,
        head_mask: torch.Tensor | None = None,
        token_embeddings: torch.Tensor | None = None,
        recorder: Recorder | None = None,
    ):
        """Encoder: ``src [batch, src_len]`` → ``(memory [batch, src_len, d_model], weights)``.

        ``weights`` is a list (one per layer) of ``[batch, heads, src_len, src_len]`` when traced, else empty.
        ``head_mask``: ``[layers, heads]`` multipliers (0 ablates a head). ``token_embeddings``: see
        :meth:`embed_tokens`. ``recorder``: takes the traced path and receives every module's record and the stream
        entering each layer and leaving the last (:mod:`model.recorder`; one of the streams alone keeps the fast
        path).
        """
        trace = trace or (recorder is not None and recorder.modules)
        mask = self.src_mask(src)
        x = self.embed_tokens(src, token_embeddings=token_embeddings)
        positions = torch.arange(src.size(1), device=src.device)
        weights = []
        if recorder is not None:
            recorder.stream("encoder", x)
        for i, layer in enumerate(self.encoder_layers):
            x, w = layer(
                x,
                mask,
                trace=trace,
                head_mask=None if head_mask is None else head_mask[i],
                positions=positions,
                record=sink_of(recorder, "encoder", i),
            )
            if trace:
                weights.append(w)
            if recorder is not None:
                recorder.stream("encoder", x)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, weights

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        *,
        cache: KVCache | None = None,
        trace: bool = False,
        self_head_mask: torch.Tensor | None = None,
        cross_head_mask: torch.Tensor | None = None,
        token_embeddings: torch.Tensor | None = None,
        recorder: Recorder | None = None,
    ) -> DecoderOutput:
        """Decoder over ``tgt [batch, tgt_len]`` (the new positions only, when a cache is given).

        With ``cache``, the new tokens sit at positions ``cache.positions …`` and attend to every cached row;
        cached cross-attention K/V are reused, so ``memory`` is only needed on the first call.
        Keys equal to ``pad_id`` are masked, except at position 0: the first target token is the start token,
        never padding, even where it is ``<pad>`` (Marian's decoder starts from ``<pad>``). ``token_embeddings``
        ``[batch, tgt_len, d_model]``: see :meth:`embed_tokens`. ``recorder``: as in :meth:`encode` (the self-attention
        kind is ``decoder`` in an encoder-decoder, ``self`` in a decoder-only model).
        """
        trace = trace or (recorder is not None and recorder.modules)
        self_kind = self.cfg.decoder_self_kind
        offset = cache.positions if cache is not None else 0
        t = tgt.size(1)
        self_mask = self.tgt_mask(tgt, offset)
        x = self.embed_tokens(tgt, offset, token_embeddings)
        positions = torch.arange(offset, offset + t, device=tgt.device)
        out = DecoderOutput(x, [], [])
        skip = self.layers_to_drop(cache is None and not trace and recorder is None)
        if recorder is not None:
            recorder.stream("decoder", x)
        for i, layer in enumerate(self.decoder_layers):
            if i in skip:
                continue
            x, w_self, w_cross = layer(
                x,
                self_mask,
                memory,
                memory_mask,
                self_cache=cache.self_attn[i] if cache is not None else None,
                cross_cache=cache.cross_attn[i] if cache is not None and cache.cross_attn else None,
                trace=trace,
                self_head_mask=None if self_head_mask is None else self_head_mask[i],
                cross_head_mask=None if cross_head_mask is None else cross_head_mask[i],
                positions=positions,
                self_record=sink_of(recorder, self_kind, i),
                cross_record=sink_of(recorder, "cross", i),
            )
            if recorder is not None:
                recorder.stream("decoder", x)
            if trace:
                out.self_weights.append(w_self)
                if w_cross is not None:
                    out.cross_weights.append(w_cross)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        out.hidden = x
        return out

    def layers_to_drop(self, allowed: bool) -> set[int]:
        """Decoder layers skipped in this forward pass: each with probability ``cfg.decoder_layerdrop`` (LayerDrop,
        Fan et al. 2020, §3), only in training mode and when ``allowed`` (never with a KV cache or a trace, whose
        layer lists must be complete). The residual stream passes a skipped layer unchanged."""
        p = self.cfg.decoder_layerdrop
        if not (self.training and allowed and p):
            return set()
        return {i for i, r in enumerate(torch.rand(len(self.decoder_layers)).tolist()) if r < p}

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[batch, tgt_len, d_model]`` → ``[batch, tgt_len, vocab]`` (unnormalised log-probabilities); with
        ``cfg.logits_bias`` the projection adds a bias ``[vocab]`` (Marian's ``final_logits_bias``)."""
        return self.generator(hidden)

    def next_token_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """:meth:`logits` for choosing a token: ``[.., d_model] → [.., vocab]`` with every id of
        ``cfg.suppress_ids`` at −∞ (as ``transformers``' ``bad_words_ids`` do), so no decoding picks it; unchanged
        when the list is empty (every model of this project)."""
        logits = self.logits(hidden)
        if self.cfg.suppress_ids:
            logits = logits.index_fill(-1, torch.tensor(self.cfg.suppress_ids, device=logits.device), float("-inf"))
        return logits

    def forward(self, src: torch.Tensor | None, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``[batch, tgt_len, vocab]`` (fast path). ``src`` is ignored for decoder-only."""
        if self.cfg.is_encoder_decoder:
            if src is None:
                raise ValueError("an encoder-decoder model needs src")
            memory, _ = self.encode(src)
            return self.logits(self.decode(tgt, memory, self.src_mask(src)).hidden)
        return self.logits(self.decode(tgt).hidden)

    def new_cache(self) -> KVCache:
        return KVCache.empty(len(self.decoder_layers), cross=self.cfg.is_encoder_decoder)
