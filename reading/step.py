"""One decoding step as the attribution methods see it, and the scores they give its tokens.

A step is a source (encoder-decoder only), the target prefix the decoder has read so far (``<bos>`` first) and the
token it chose next. Every method of :mod:`reading` answers with a :class:`TokenScores`: one score per source token
and one per prefix token, the same tokens for every method, normalised to shares of one scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from model.transformer import Transformer


def frozen_array(values) -> np.ndarray:
    """A float64 copy of ``values`` that refuses writes: results are shared, so nothing may change them."""
    arr = np.array(values, dtype=np.float64)
    arr.setflags(write=False)
    return arr


def shares(scores: np.ndarray) -> np.ndarray:
    """``|s| / Σ|s|`` over one side's tokens (all zeros when every score is zero), ``(n,) → (n,)``."""
    magnitude = np.abs(scores)
    total = magnitude.sum()
    return frozen_array(magnitude / total if total > 0 else magnitude)


@dataclass(frozen=True)
class Step:
    """The inputs of one prediction.

    Attributes:
        src_ids: source ids ``(S,)`` (with the ``<eos>`` the encoder was trained with); ``()`` for a decoder-only
            model.
        prefix_ids: the decoder's inputs ``(T,)``, ``<bos>`` first (or a decoder-only model's prompt so far).
        token_id: the token predicted after the last prefix position.
    """

    src_ids: tuple[int, ...]
    prefix_ids: tuple[int, ...]
    token_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "src_ids", tuple(int(i) for i in self.src_ids))
        object.__setattr__(self, "prefix_ids", tuple(int(i) for i in self.prefix_ids))
        object.__setattr__(self, "token_id", int(self.token_id))

    def check(self, model: Transformer) -> None:
        """Raise ``ValueError`` when the step does not fit ``model``: no prefix, a source missing (encoder-decoder)
        or given (decoder-only), an id outside the vocabulary, a sequence longer than ``max_len``, or the model in
        training mode (dropout would make every score random; the model is shared, so it is not switched here)."""
        cfg = model.cfg
        if model.training:
            raise ValueError("attribution needs the model in eval mode (call model.eval() before)")
        if not self.prefix_ids:
            raise ValueError("a step needs at least one prefix token (<bos>)")
        if cfg.is_encoder_decoder and not self.src_ids:
            raise ValueError("an encoder-decoder step needs source ids")
        if not cfg.is_encoder_decoder and self.src_ids:
            raise ValueError("a decoder-only model has no source: pass src_ids=()")
        ids = self.src_ids + self.prefix_ids + (self.token_id,)
        if min(ids) < 0 or max(ids) >= cfg.vocab_size:
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size})")
        if max(len(self.src_ids), len(self.prefix_ids)) > cfg.max_len:
            raise ValueError(f"a sequence is longer than the model's max_len {cfg.max_len}")

    def tensors(self, model: Transformer) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(src [1, S] or None, prefix [1, T])`` on the model's device."""
        dev = model.device
        src = torch.tensor([self.src_ids], device=dev) if self.src_ids else None
        return src, torch.tensor([self.prefix_ids], device=dev)


def token_log_probs(
    model: Transformer,
    src: torch.Tensor | None,
    prefix: torch.Tensor,
    token_id: int,
    embeddings: tuple[torch.Tensor, ...] | None = None,
) -> torch.Tensor:
    """``log p(token_id | src, prefix)`` after the last prefix position, ``[batch]`` (natural log; float32, or
    float64 for a float64 model).

    Args:
        src: ``[batch or 1, S]`` ids, ``None`` for a decoder-only model; prefix: ``[batch or 1, T]`` ids (a batch
            of one is broadcast to the embeddings' batch).
        embeddings: the token embeddings to use instead of ``embed(ids)``: ``(src [batch, S, d_model],
            prefix [batch, T, d_model])``, or ``(prefix,)`` for a decoder-only model; the masks still come from
            the ids, so padding and causality are those of the real step.
    """
    batch = max(t.size(0) for t in (embeddings or ()) + tuple(x for x in (src, prefix) if x is not None))
    prefix = prefix.expand(batch, -1)
    src_emb, tgt_emb = (None, None) if embeddings is None else ((None,) + embeddings)[-2:]
    memory = memory_mask = None
    if src is not None:
        src = src.expand(batch, -1)
        memory, _ = model.encode(src, token_embeddings=src_emb)
        memory_mask = model.src_mask(src)
    hidden = model.decode(prefix, memory, memory_mask, token_embeddings=tgt_emb).hidden[:, -1]
    logits = model.logits(hidden).to(torch.promote_types(hidden.dtype, torch.float32))
    return F.log_softmax(logits, dim=-1)[:, token_id]


@dataclass(frozen=True)
class TokenScores:
    """One method's scores for one step.

    Attributes:
        method: its name (``"attention"``, ``"value_norm"``, ``"grad_x_input"``, ``"integrated_gradients"``).
        source: ``(S,)`` one score per source token (empty for a decoder-only model); signed for the gradient
            methods (log-probability units, nats), non-negative for the attention ones.
        prefix: ``(T,)`` one score per prefix token, likewise.

    :attr:`source_shares` and :attr:`prefix_shares` put every method on one scale: ``|score|`` over the side's
    total, so each side sums to 1 (0 where a method gives the side nothing). Attention weights are distributions
    over each side's keys separately (cross-attention over the source, self-attention over the prefix), which is
    why the shares are per side; how the prediction splits between the sides is
    :attr:`reading.attribution.StepAttribution.source_share`.
    """

    method: str
    source: np.ndarray
    prefix: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", frozen_array(self.source))
        object.__setattr__(self, "prefix", frozen_array(self.prefix))

    @property
    def source_shares(self) -> np.ndarray:
        """``(S,)``, summing to 1 (or all 0)."""
        return shares(self.source)

    @property
    def prefix_shares(self) -> np.ndarray:
        """``(T,)``, summing to 1 (or all 0)."""
        return shares(self.prefix)
