"""``Trace``: everything one traced forward pass exposes to the pages and ``viz/``.

Attention tensors are ``[layers, heads, q_len, k_len]`` (rows = queries, columns = keys), one per kind:
``encoder`` (source self-attention), ``decoder`` (masked target self-attention) and ``cross``
(target queries over source keys), or ``self`` for a decoder-only model (:data:`model.config.CAUSAL_KINDS` are
masked). The words the pages show for each kind are in ``viz/labels.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import torch

from .tokenizer import TextTokenizer
from .transformer import Transformer


@dataclass(frozen=True, eq=False)  # tensors inside: compared and hashed by identity
class Trace:
    """One sentence pair seen by the model; frozen, since a page caches one trace for every visitor of a sentence.

    The token and id lists are stored as tuples and ``attention`` as a read-only mapping, whatever the caller
    passed; the tensors :func:`trace_pair` makes are inference tensors, which refuse in-place changes outside
    ``torch.inference_mode``.

    Attributes:
        src_tokens / tgt_tokens: BPE pieces (``tgt_tokens`` starts with ``<bos>``; the decoder's *inputs*).
        src_ids / tgt_ids: their ids.
        src_offsets: ``(start, end)`` character span of each source piece.
        attention: kind → ``[layers, heads, q_len, k_len]`` float tensor on the CPU.
        logits: ``[tgt_len, vocab]``, the next-token logits after each target input position.
    """

    src_tokens: tuple[str, ...]
    tgt_tokens: tuple[str, ...]
    src_ids: tuple[int, ...]
    tgt_ids: tuple[int, ...]
    src_offsets: tuple[tuple[int, int], ...] = ()
    attention: Mapping[str, torch.Tensor] = field(default_factory=dict)
    logits: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("src_tokens", "tgt_tokens", "src_ids", "tgt_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "src_offsets", tuple(tuple(o) for o in self.src_offsets))
        object.__setattr__(self, "attention", MappingProxyType(dict(self.attention)))

    @property
    def kinds(self) -> list[str]:
        return list(self.attention)

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """``(query_labels, key_labels)`` for an attention kind."""
        if kind == "encoder":
            return self.src_tokens, self.src_tokens
        if kind == "cross":
            return self.tgt_tokens, self.src_tokens
        return self.tgt_tokens, self.tgt_tokens


@torch.inference_mode()
def trace_pair(
    model: Transformer,
    tokenizer: TextTokenizer,
    src_ids: list[int] | None,
    tgt_ids: list[int],
    src_offsets: list[tuple[int, int]] | None = None,
) -> Trace:
    """Run the traced path over a source and a target prefix (``tgt_ids`` starts with ``<bos>``).

    For decoder-only models pass ``src_ids=None``; the result then has the single kind ``self``.
    """
    dev = model.device
    tgt = torch.tensor([tgt_ids], device=dev)
    attention: dict[str, torch.Tensor] = {}
    if model.cfg.is_encoder_decoder:
        if not src_ids:
            raise ValueError("an encoder-decoder trace needs src_ids")
        src = torch.tensor([src_ids], device=dev)
        memory, enc_w = model.encode(src, trace=True)
        out = model.decode(tgt, memory, model.src_mask(src), trace=True)
        attention["encoder"] = torch.stack([w[0] for w in enc_w]).float().cpu()
        attention["decoder"] = torch.stack([w[0] for w in out.self_weights]).float().cpu()
        attention["cross"] = torch.stack([w[0] for w in out.cross_weights]).float().cpu()
    else:
        out = model.decode(tgt, trace=True)
        attention["self"] = torch.stack([w[0] for w in out.self_weights]).float().cpu()
    return Trace(
        src_tokens=tokenizer.tokens(src_ids) if src_ids else [],
        tgt_tokens=tokenizer.tokens(tgt_ids),
        src_ids=list(src_ids or []),
        tgt_ids=list(tgt_ids),
        src_offsets=list(src_offsets or []),
        attention=attention,
        logits=model.logits(out.hidden[0]).float().cpu(),
    )
