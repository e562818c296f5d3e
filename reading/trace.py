"""``Trace``: one traced forward pass over a sentence, the value every view of the model reads.

One pass of the model's own code (:meth:`~model.transformer.Transformer.encode` / ``decode`` on the explicit-softmax
path, with a :class:`~model.recorder.Recorder` of its own: nothing is registered on the shared model) gives:

* ``attention``: per kind, ``[layers, heads, q_len, k_len]`` weights (rows = queries, columns = keys): ``encoder``
  (source self-attention), ``decoder`` (masked target self-attention) and ``cross`` (target queries over source
  keys), or ``self`` for a decoder-only model (:data:`model.config.CAUSAL_KINDS` are masked); the heatmaps;
* ``modules``: per attention module, a :class:`ModuleTrace`: what entered it, each head's q, k, v, scores, weights
  and output before Wᴼ (the query·key view :mod:`reading.qk`, the live numbers :mod:`teaching.live`, the attention
  side of attribution :mod:`reading.attention_scores` and the what-if :mod:`reading.patching` read these);
* ``streams``: the residual stream entering every layer and leaving the last (the logit lens, :mod:`reading.lens`);
* ``logits``: the next-token logits after every target position, when asked for (no page reads them: they are a
  vocabulary-wide row per position, 8 MB on a 128-piece sentence of a 16k vocabulary, 30 MB of Marian's 58k).

A trace is kept for a whole room (the heavy-work gate's shared results), so it holds each number once: the heatmaps'
``attention`` and the modules' ``weights`` are one tensor, and what follows from the rest (the scores, each head's
weighted sum of values) is computed when read: a 128-piece sentence pair's trace is 24 MB (54 MB with every
number held apart and the logits).

The words the pages show for each kind are in ``viz/labels.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping, Sequence, overload

import torch

from model.attention import MultiHeadAttention
from model.recorder import AttentionRecord, Recorder
from model.tokenizing import Tokenizer
from model.transformer import Transformer


@dataclass(frozen=True, eq=False)  # tensors inside: compared and hashed by identity
class ModuleTrace:
    """One attention module on one sentence (batch 1, CPU float32; ``h`` heads, ``q`` queries, ``k`` keys).

    Attributes:
        kind / layer: which module (``layer`` 0-based); position: ``"rope"``, ``"alibi"`` or ``None``, the scheme
            acting inside it.
        x_q: ``[q, d_model]`` what the queries are projected from (after the sub-layer's LayerNorm when pre-LN);
            x_kv: ``[k, d_model]`` what the keys and values are (the encoder output ``memory`` for cross-attention).
        mask: bool ``[q, k]``, ``True`` = may attend (causal and padding masks).
        q_positions / k_positions: ``[q]`` / ``[k]`` absolute positions.
        q_raw / k_raw: ``[h, q | k, d_k]`` ``x W + b`` per head, before RoPE; q / k: as they enter the score (rotated
            by RoPE, else the same tensors); v: ``[h, k, d_k]``.
        bias: ``[h, q, k]`` ALiBi's ``−m_h·|i − j|``, else ``None``; slopes: ``[h]`` its ``m_h``, else ``None``.
        weights: ``[h, q, k]`` the softmax, the heatmap (masked keys exactly 0); a view of :attr:`Trace.attention`.

    Computed when read (properties): :attr:`scores` and :attr:`heads`.
    """

    kind: str
    layer: int
    position: str | None
    x_q: torch.Tensor
    x_kv: torch.Tensor
    mask: torch.Tensor
    q_positions: torch.Tensor
    k_positions: torch.Tensor
    q_raw: torch.Tensor
    k_raw: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: torch.Tensor | None
    slopes: torch.Tensor | None
    weights: torch.Tensor

    @property
    def n_heads(self) -> int:
        return self.q.size(0)

    @property
    def d_k(self) -> int:
        return self.q.size(-1)

    @property
    def scale(self) -> float:
        """``1 / √d_k``."""
        return 1.0 / math.sqrt(self.d_k)

    @property
    def scores(self) -> torch.Tensor:
        """``[h, q, k]`` ``q·k / √d_k`` (paper eq. 1), before ALiBi's bias and the mask: computed as the module
        computes it, on the recorded q and k (for RoPE, the rotated ones)."""
        return self.q @ self.k.transpose(-2, -1) / math.sqrt(self.d_k)

    @property
    def heads(self) -> torch.Tensor:
        """``[h, q, d_k]`` each head's ``Σ_j w_ij v_j`` (paper eq. 1's output), before the heads are joined and Wᴼ."""
        return self.weights @ self.v


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
        logits: ``[tgt_len, vocab]``, the next-token logits after each target input position (``Transformer.logits``:
            no ids suppressed).
        modules: ``(kind, layer) → ModuleTrace`` for every attention module (empty in a trace read back from a run's
            saved attention, :mod:`training.runs`).
        streams: ``"encoder"`` / ``"decoder"`` → ``[layers + 1, seq, d_model]``: the stream entering the first layer
            (embeddings and positions), then after each layer, before any final LayerNorm.
    """

    src_tokens: tuple[str, ...]
    tgt_tokens: tuple[str, ...]
    src_ids: tuple[int, ...]
    tgt_ids: tuple[int, ...]
    src_offsets: tuple[tuple[int, int], ...] = ()
    attention: Mapping[str, torch.Tensor] = field(default_factory=dict)
    logits: torch.Tensor | None = None
    modules: Mapping[tuple[str, int], ModuleTrace] = field(default_factory=dict)
    streams: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("src_tokens", "tgt_tokens", "src_ids", "tgt_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "src_offsets", tuple(tuple(o) for o in self.src_offsets))
        for name in ("attention", "modules", "streams"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def kinds(self) -> list[str]:
        return list(self.attention)

    def labels(self, kind: str) -> tuple[Sequence[str], Sequence[str]]:
        """``(query_labels, key_labels)`` for an attention kind."""
        if kind == "encoder":
            return self.src_tokens, self.src_tokens
        if kind == "cross":
            return self.tgt_tokens, self.src_tokens
        return self.tgt_tokens, self.tgt_tokens

    def module(self, kind: str, layer: int) -> ModuleTrace:
        """The :class:`ModuleTrace` of ``kind`` in ``layer`` (0-based).

        Raises:
            ValueError: no such kind or layer (the message names the ones there are).
        """
        if (kind, layer) in self.modules:
            return self.modules[(kind, layer)]
        kinds = sorted({k for k, _ in self.modules})
        if kind not in kinds:
            raise ValueError(f"this trace has no {kind!r} attention; it has {', '.join(kinds) or 'none recorded'}")
        n = sum(k == kind for k, _ in self.modules)
        raise ValueError(f"layer {layer} is out of range: {kind} attention has layers 0–{n - 1}")


def attention_module(model: Transformer, kind: str, layer: int) -> MultiHeadAttention:
    """The attention module of ``kind`` (``encoder``, ``decoder``, ``cross``, ``self``) in ``layer`` (0-based).

    Raises:
        ValueError: the model has no such kind or layer (the message names the ones it has).
    """
    counts = model.cfg.attention_layers()
    if kind not in counts:
        raise ValueError(f"this model has no {kind!r} attention; it has {', '.join(counts)}")
    if not 0 <= layer < counts[kind]:
        raise ValueError(f"layer {layer} is out of range: {kind} attention has layers 0–{counts[kind] - 1}")
    if kind == "encoder":
        found = model.encoder_layers[layer].self_attn
    else:
        block = model.decoder_layers[layer]
        found = block.cross_attn if kind == "cross" else block.self_attn
    if not isinstance(found, MultiHeadAttention):  # nn.ModuleList types its layers as plain modules
        raise TypeError(f"the {kind} attention of layer {layer} is a {type(found).__name__}, not MultiHeadAttention")
    return found


@overload
def _cpu(t: torch.Tensor) -> torch.Tensor: ...


@overload
def _cpu(t: None) -> None: ...


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float().cpu()


def module_trace(model: Transformer, kind: str, layer: int, rec: AttentionRecord) -> ModuleTrace:
    """A recorded pass of one module (batch row 0, no KV cache) as a :class:`ModuleTrace`."""
    module = attention_module(model, kind, layer)
    q_len, k_len = rec.q.size(2), rec.k.size(2)
    mask = (
        torch.ones(q_len, k_len, dtype=torch.bool)
        if rec.mask is None
        else rec.mask.expand(1, 1, q_len, k_len)[0, 0].cpu()
    )
    q_pos = torch.arange(q_len) if rec.positions is None else rec.positions.cpu()
    k_pos = q_pos if kind != "cross" else torch.arange(k_len)
    q, k = rec.q[0].float(), rec.k[0].float()
    return ModuleTrace(
        kind=kind,
        layer=layer,
        position=module.position,
        x_q=_cpu(rec.x_q[0]),
        x_kv=_cpu((rec.x_q if rec.x_kv is None else rec.x_kv)[0]),
        mask=mask,
        q_positions=q_pos,
        k_positions=k_pos,
        q_raw=_cpu(rec.q_raw[0]),
        k_raw=_cpu(rec.k_raw[0]),
        q=_cpu(q),
        k=_cpu(k),
        v=_cpu(rec.v[0]),
        bias=_cpu(rec.bias),
        slopes=_cpu(module.slopes) if module.position == "alibi" else None,
        weights=_cpu(rec.weights[0]),
    )


@torch.inference_mode()
def trace_pair(
    model: Transformer,
    tokenizer: Tokenizer | None,
    src_ids: list[int] | None,
    tgt_ids: list[int],
    src_offsets: list[tuple[int, int]] | None = None,
    logits: bool = False,
) -> Trace:
    """Run the traced path over a source and a target prefix (``tgt_ids`` starts with ``<bos>``).

    For decoder-only models pass ``src_ids=None``; the result then has the single kind ``self``. Without a
    ``tokenizer`` the token strings are left empty (the readers of :mod:`reading` need only ids and numbers).
    ``logits``: also keep :attr:`Trace.logits` (else ``None``).

    Raises:
        ValueError: an encoder-decoder model without ``src_ids``, or no ``tgt_ids``.
    """
    if not tgt_ids:
        raise ValueError("the decoder needs at least one input id (<bos>)")
    dev = model.device
    tgt = torch.tensor([list(tgt_ids)], device=dev)
    recorder = Recorder()
    if model.cfg.is_encoder_decoder:
        if not src_ids:
            raise ValueError("an encoder-decoder trace needs src_ids")
        src = torch.tensor([list(src_ids)], device=dev)
        memory, _ = model.encode(src, recorder=recorder)
        out = model.decode(tgt, memory, model.src_mask(src), recorder=recorder)
    else:
        out = model.decode(tgt, recorder=recorder)
    modules = {where: module_trace(model, *where, rec) for where, rec in recorder.attention.items()}
    attention: dict[str, torch.Tensor] = {}
    for kind, n in model.cfg.attention_layers().items():
        attention[kind] = torch.stack([modules[(kind, layer)].weights for layer in range(n)])
        for layer in range(n):  # the modules' weights become views of the heatmaps' tensor: held once
            modules[(kind, layer)] = replace(modules[(kind, layer)], weights=attention[kind][layer])
    tokens = (lambda ids: tokenizer.tokens(ids) if ids else []) if tokenizer is not None else (lambda ids: [])
    return Trace(
        src_tokens=tuple(tokens(src_ids)),
        tgt_tokens=tuple(tokens(tgt_ids)),
        src_ids=tuple(src_ids or ()),
        tgt_ids=tuple(tgt_ids),
        src_offsets=tuple(src_offsets or ()),
        attention=attention,
        logits=model.logits(out.hidden[0]).float().cpu() if logits else None,
        modules=modules,
        streams={side: torch.stack([x[0] for x in xs]).float().cpu() for side, xs in recorder.streams.items()},
    )


@torch.inference_mode()
def streams_pair(model: Transformer, src_ids: list[int] | None, tgt_ids: list[int]) -> Mapping[str, torch.Tensor]:
    """The residual streams of a source and a target prefix alone, as :attr:`Trace.streams` holds them
    (``"encoder"`` / ``"decoder"`` → ``[layers + 1, seq, d_model]``, CPU float32), from one pass on the fast path the
    decoding takes, recording no attention module (what the logit lens reads, and nothing else).

    Raises:
        ValueError: as :func:`trace_pair`.
    """
    if not tgt_ids:
        raise ValueError("the decoder needs at least one input id (<bos>)")
    dev = model.device
    tgt = torch.tensor([list(tgt_ids)], device=dev)
    recorder = Recorder(modules=False)
    if model.cfg.is_encoder_decoder:
        if not src_ids:
            raise ValueError("an encoder-decoder pass needs src_ids")
        src = torch.tensor([list(src_ids)], device=dev)
        memory, _ = model.encode(src, recorder=recorder)
        model.decode(tgt, memory, model.src_mask(src), recorder=recorder)
    else:
        model.decode(tgt, recorder=recorder)
    return MappingProxyType(
        {side: torch.stack([x[0] for x in xs]).float().cpu() for side, xs in recorder.streams.items()}
    )
