"""The reference point our model is measured against: PyTorch's own ``torch.nn.Transformer``.

Our model is only worth its code if it does at least as well as "a same-budget ``torch.nn.Transformer`` baseline
trained the same way".
:class:`TorchBaseline` is that baseline, built the way the PyTorch translation tutorial builds it: one shared
token embedding scaled by √d_model, the sinusoidal encoding of paper §3.5, ``nn.Transformer`` in the middle
(its own encoder/decoder layers, attention dropout and final norms) and a generator tied to the embedding.
Everything else — data, batches, schedule, label smoothing, clipping, steps, evaluation — is
``python -m trainer.train`` unchanged, selected with ``--impl torch``.

It has no KV cache and no attention tracing (``nn.Transformer`` exposes neither), so its decoding recomputes the
whole prefix at every step. It duck-types the parts of :class:`~model.transformer.Transformer` that training and
:func:`~decoding.batched.greedy_batch` use: ``cfg``, ``device``, ``forward``, ``encode``, ``src_mask``,
``new_cache``, ``decode``, ``logits`` and ``next_token_logits``. Its checkpoint folders carry ``"impl": "torch"`` in
``card.json``; the explorer cannot open them (it needs our traced model) and says so.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from model.checkpoint import read_weights
from model.config import ModelConfig
from model.positional import PositionalEncoding
from model.transformer import causal_mask

IMPLS = ("ours", "torch")


@contextmanager
def no_fast_path_under_cpu_autocast():
    """Turn ``nn.Transformer``'s inference fast path off while CPU bf16 autocast is on, and restore it after.

    In eval mode under ``no_grad`` the encoder layers call the fused ``torch._transformer_encoder_layer_fwd`` (on
    nested tensors). Its own guard checks only CUDA autocast, so under CPU autocast it receives fp32 weights and bf16
    activations and raises "expected scalar type Float but found BFloat16". The slow path is the one training runs,
    and autocast handles it.
    """
    if not torch.is_autocast_enabled("cpu"):
        yield
        return
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


@dataclass
class PrefixCache:
    """Stand-in for :class:`~model.transformer.KVCache`: it keeps the decoder *inputs* seen so far, not K/V."""

    ids: list[torch.Tensor] = field(default_factory=list)

    @property
    def positions(self) -> int:
        return sum(t.size(1) for t in self.ids)


@dataclass
class BaselineOutput:
    hidden: torch.Tensor  # [batch, new_len, d_model]


class TorchBaseline(nn.Module):
    """Encoder-decoder on ``torch.nn.Transformer`` (batch first), configured by a :class:`ModelConfig`.

    Shapes: ``src [batch, src_len]``, ``tgt [batch, tgt_len]`` → logits ``[batch, tgt_len, vocab]``.

    Raises:
        ValueError: the config is decoder-only or asks for a relative position scheme (RoPE/ALiBi live inside
            our attention; ``nn.Transformer`` cannot take them).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if not cfg.is_encoder_decoder:
            raise ValueError("the torch.nn.Transformer baseline is encoder-decoder only")
        if cfg.pos_encoding not in ("sinusoidal", "learned", "none"):
            raise ValueError(f"the torch.nn.Transformer baseline cannot use pos_encoding={cfg.pos_encoding!r}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = PositionalEncoding(cfg.pos_encoding, cfg.max_len, cfg.d_model)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor … norm_first": a note about a fast path, not a fault
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(
                d_model=cfg.d_model,
                nhead=cfg.n_heads,
                num_encoder_layers=cfg.n_encoder_layers,
                num_decoder_layers=cfg.n_decoder_layers,
                dim_feedforward=cfg.d_ff,
                dropout=cfg.dropout,
                batch_first=True,
                norm_first=cfg.norm_first,
            )  # its constructor applies Xavier-uniform to every matrix
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        if cfg.tie_embeddings:
            self.generator.weight = self.embed.weight

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb_dropout(self.pos(self.embed(ids) * math.sqrt(self.cfg.d_model), 0))

    def src_mask(self, src: torch.Tensor) -> torch.Tensor:
        """Key-padding mask in ``nn.Transformer``'s convention: ``[batch, src_len]``, True = padding."""
        return src == self.cfg.pad_id

    def encode(self, src: torch.Tensor):
        """``src [batch, src_len]`` → ``(memory [batch, src_len, d_model], [])``."""
        with no_fast_path_under_cpu_autocast():
            return self.transformer.encoder(self.embed_tokens(src), src_key_padding_mask=self.src_mask(src)), []

    def _decode_full(self, tgt: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor) -> torch.Tensor:
        t = tgt.size(1)
        future = ~causal_mask(t, t, tgt.device)  # True = may not attend
        with no_fast_path_under_cpu_autocast():
            return self.transformer.decoder(
                self.embed_tokens(tgt),
                memory,
                tgt_mask=future,
                tgt_key_padding_mask=tgt == self.cfg.pad_id,
                memory_key_padding_mask=memory_pad,
                tgt_is_causal=True,
            )

    def decode(
        self, tgt: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor, *, cache: PrefixCache | None = None
    ) -> BaselineOutput:
        """Hidden states of the new positions ``[batch, tgt_len, d_model]``; with ``cache`` the prefix is recomputed."""
        if cache is None:
            return BaselineOutput(self._decode_full(tgt, memory, memory_mask))
        cache.ids.append(tgt)
        full = torch.cat(cache.ids, dim=1)
        # Only the first position of a sequence may be <bos>; pads in later columns are finished rows.
        hidden = self._decode_full(torch.where(full == self.cfg.pad_id, self.cfg.eos_id, full), memory, memory_mask)
        return BaselineOutput(hidden[:, -tgt.size(1) :])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.generator(hidden)

    def next_token_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """What decoding chooses from: the plain logits (a baseline suppresses no token)."""
        return self.generator(hidden)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory, _ = self.encode(src)
        return self.logits(self.decode(tgt, memory, self.src_mask(src)).hidden)

    def new_cache(self) -> PrefixCache:
        return PrefixCache()


def build_model(cfg: ModelConfig, impl: str = "ours") -> nn.Module:
    """Our :class:`~model.transformer.Transformer` (``impl="ours"``) or the :class:`TorchBaseline`.

    Raises:
        ValueError: unknown ``impl``.
    """
    if impl == "ours":
        from model.transformer import Transformer

        return Transformer(cfg)
    if impl == "torch":
        return TorchBaseline(cfg)
    raise ValueError(f"unknown --impl {impl!r} (choose from {', '.join(IMPLS)})")


def load_baseline(folder: str | Path, device: str | torch.device = "cpu") -> TorchBaseline:
    """A :class:`TorchBaseline` from a run's checkpoint folder (``config.json`` + ``model.safetensors``), float32."""
    folder = Path(folder)
    cfg = ModelConfig.from_json(folder / "config.json")
    model = TorchBaseline(cfg)
    state = {k: v.float() for k, v in read_weights(folder / "model.safetensors").items()}
    if cfg.tie_embeddings:
        state["generator.weight"] = state["embed.weight"]
    model.load_state_dict(state)
    return model.to(device).eval()
