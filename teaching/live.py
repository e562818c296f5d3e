"""Scaled dot-product attention with a loaded model's own numbers, for the Worked examples page.

For one attention module of a :class:`~model.transformer.Transformer` (an attention kind and a layer), one head and
one sentence, :func:`live_head` returns what that head computes, in the paper's notation (Vaswani et al. 2017,
§3.2.2, ``head_i = Attention(X W_i^Q, X W_i^K, X W_i^V)``):

* ``X``, the module's input, one row per token: the token embeddings × √d_model + positions entering layer 1, the
  residual stream entering a later layer; for a pre-LN model (``cfg.norm_first``) the LayerNorm the sub-layer applies
  first is applied (what the projections read). Cross-attention has two inputs: its queries read the decoder's
  stream, its keys and values the encoder's output (the memory);
* the head's columns of ``W^Q``, ``W^K``, ``W^V`` (``[d_model, d_k]``) and of their biases, and its rows of ``W^O``;
* ``Q``, ``K``, ``V`` (``[tokens, d_k]``; after RoPE's rotation for a RoPE model) and the weights the model computes
  from them with every one of the ``d_k`` columns (its mask and ALiBi's bias included), all read from the sentence's
  traced forward pass (:func:`reading.trace.trace_pair`), the one trace every view reads.

Every checkpoint the app loads runs through our modules (a Hugging Face folder's fused GPT-2 ``c_attn`` is split into
``q_proj``, ``k_proj``, ``v_proj`` on loading, :mod:`model.hf.weights`), so one reading serves them all. The model
is only read, under ``torch.inference_mode``. :func:`cut` takes the few tokens and columns a lecture can read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.config import CAUSAL_KINDS, DECODER_ONLY_KINDS, ENCODER_DECODER_KINDS
from model.transformer import Transformer
from reading.trace import Trace, attention_module

#: What the step-by-step arithmetic shows at most: tokens (rows) and columns of d_k.
SHOWN_TOKENS, SHOWN_COLUMNS = 6, 4


def _frozen(t: torch.Tensor) -> np.ndarray:
    """A read-only float64 copy (the value is shared by every visitor: nobody may change it)."""
    a = np.array(t.detach().float().cpu().numpy(), dtype=np.float64)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)  # arrays inside: compared by identity
class LiveHead:
    """One head of one attention module on one sentence, as the model computes it (read-only float64 arrays).

    Attributes:
        kind: ``encoder``, ``decoder``, ``cross`` or ``self``; layer, head: 0-based.
        d_model, d_k, n_heads: the model's sizes (``d_k = d_model / n_heads``).
        x_q: ``[n_q, d_model]``, the input the queries are projected from; x_kv: ``[n_k, d_model]``, that of the keys
            and values (the same array except in cross-attention, where it is the memory).
        w_q, w_k, w_v: ``[d_model, d_k]``, the head's columns of ``W^Q``, ``W^K``, ``W^V``; b_q, b_k, b_v: ``[d_k]``;
            w_o: ``[d_k, d_model]``, the head's rows of ``W^O``.
        q, k, v: ``[n_q | n_k, d_k]``: ``X W^Q + b^Q`` and the like (``q`` and ``k`` rotated by RoPE when ``position``
            is ``"rope"``).
        weights: ``[n_q, n_k]``, ``softmax(Q Kᵀ / √d_k [+ ALiBi bias], masked)``: every row sums to 1.
        causal: keys after each query are masked; position: ``"rope"``, ``"alibi"`` or ``None`` (the scheme inside
            this module); pre_ln: ``X`` is the LayerNorm of the residual stream.
    """

    kind: str
    layer: int
    head: int
    d_model: int
    d_k: int
    n_heads: int
    x_q: np.ndarray
    x_kv: np.ndarray
    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    b_q: np.ndarray
    b_k: np.ndarray
    b_v: np.ndarray
    w_o: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    weights: np.ndarray
    causal: bool
    position: str | None
    pre_ln: bool

    @property
    def output(self) -> np.ndarray:
        """``[n_q, d_k]``: the head's output ``weights · V``, before the concatenation and ``W^O``."""
        return self.weights @ self.v

    def x_note(self) -> str:
        """What ``X`` is here, in one phrase (``"the token embeddings × √d_model + positions"``, …)."""
        stream = (
            "the token embeddings × √d_model + positions"
            if self.layer == 0
            else f"the residual stream entering layer {self.layer + 1}"
        )
        if self.kind == "cross":
            stream = f"the decoder's stream after layer {self.layer + 1}'s masked self-attention"
        return f"LayerNorm({stream})" if self.pre_ln else stream

    def x_kv_note(self) -> str:
        """What the keys' and values' input is: ``X`` again, or in cross-attention the encoder's output."""
        return "the encoder's output (the memory)" if self.kind == "cross" else self.x_note()


def kinds_of(model: Transformer) -> tuple[str, ...]:
    """The attention kinds ``model`` has, in the order the pages list them."""
    return ENCODER_DECODER_KINDS if model.cfg.is_encoder_decoder else DECODER_ONLY_KINDS


def layers_of(model: Transformer, kind: str) -> int:
    """How many layers have attention of ``kind``."""
    return len(model.encoder_layers) if kind == "encoder" else len(model.decoder_layers)


def _head_columns(linear: torch.nn.Linear, head: int, d_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W [d_model, d_k], b [d_k])`` of ``head``: ``nn.Linear`` stores ``W`` transposed, ``[out, in]``; a head owns
    the outputs ``head·d_k … (head+1)·d_k − 1``. A projection without bias gives zeros."""
    rows = slice(head * d_k, (head + 1) * d_k)
    bias = linear.bias[rows] if linear.bias is not None else torch.zeros(d_k, device=linear.weight.device)
    return linear.weight[rows].T, bias


@torch.inference_mode()
def live_head(model: Transformer, trace: Trace, kind: str, layer: int, head: int) -> LiveHead:
    """What ``head`` of the ``kind`` attention of ``layer`` computes on the sentence of ``trace``.

    Args:
        model: the Transformer that made ``trace`` (only its weights are read: the head's columns of W^Q, W^K, W^V
            and rows of W^O).
        trace: :func:`reading.trace.trace_pair` of the sentence (the decoder's inputs ``<bos>`` first, no final
            ``<eos>``, as the Attention page's trace has them): the inputs, Q, K, V and weights come from it.
        kind: one of :func:`kinds_of`; layer, head: 0-based.

    Returns:
        A :class:`LiveHead` whose ``weights`` are ``trace.attention[kind][layer, head]``.

    Raises:
        ValueError: an unknown kind, a layer or head out of range, or a trace without its modules.
    """
    kinds = kinds_of(model)
    if kind not in kinds:
        raise ValueError(f"this model's attention kinds are {', '.join(kinds)}, not {kind!r}")
    if not 0 <= layer < layers_of(model, kind):
        raise ValueError(f"layer {layer + 1} does not exist: the model has {layers_of(model, kind)}")
    if not 0 <= head < model.cfg.n_heads:
        raise ValueError(f"head {head + 1} does not exist: the model has {model.cfg.n_heads}")
    if not trace.modules:
        raise ValueError("no tokens to attend over")
    m = trace.module(kind, layer)
    module = attention_module(model, kind, layer)
    d_k = module.d_k
    (w_q, b_q), (w_k, b_k), (w_v, b_v) = (
        _head_columns(p, head, d_k) for p in (module.q_proj, module.k_proj, module.v_proj)
    )
    w_o = module.out_proj.weight[:, head * d_k : (head + 1) * d_k].T  # W^O's rows that multiply this head's output
    return LiveHead(
        kind=kind,
        layer=layer,
        head=head,
        d_model=module.d_model,
        d_k=d_k,
        n_heads=module.n_heads,
        x_q=_frozen(m.x_q),
        x_kv=_frozen(m.x_kv),
        w_q=_frozen(w_q),
        w_k=_frozen(w_k),
        w_v=_frozen(w_v),
        b_q=_frozen(b_q),
        b_k=_frozen(b_k),
        b_v=_frozen(b_v),
        w_o=_frozen(w_o),
        q=_frozen(m.q[head]),
        k=_frozen(m.k[head]),
        v=_frozen(m.v[head]),
        weights=_frozen(m.weights[head]),
        causal=kind in CAUSAL_KINDS,
        position=module.position,
        pre_ln=model.cfg.norm_first,
    )


@dataclass(frozen=True)
class Cut:
    """The part of a :class:`LiveHead` the step-by-step arithmetic shows: the first ``n_q`` of ``q_total`` queries, the
    first ``n_k`` of ``k_total`` keys, the first ``n_cols`` of the ``d_k`` columns, and the first ``n_features`` of the
    ``d_model`` features in the previews of ``X`` and ``W``."""

    n_q: int
    n_k: int
    n_cols: int
    n_features: int
    q_total: int
    k_total: int

    def of(self, live: LiveHead) -> dict[str, np.ndarray]:
        """The cut matrices: ``x_q`` / ``x_kv`` ``[n, n_features]`` and ``w_q`` / ``w_k`` / ``w_v``
        ``[n_features, n_cols]`` (previews: ``Q = X W^Q + b^Q`` sums over all ``d_model`` features), ``b_q`` …
        ``[1, n_cols]``, and ``q`` ``[n_q, n_cols]``, ``k`` / ``v`` ``[n_k, n_cols]`` (exact columns of Q, K, V)."""
        c, f = slice(0, self.n_cols), slice(0, self.n_features)
        out = {
            "x_q": live.x_q[: self.n_q, f],
            "x_kv": live.x_kv[: self.n_k, f],
            "q": live.q[: self.n_q, c],
            "k": live.k[: self.n_k, c],
            "v": live.v[: self.n_k, c],
        }
        for name in ("w_q", "w_k", "w_v"):
            out[name] = getattr(live, name)[f, c]
        for name in ("b_q", "b_k", "b_v"):
            out[name] = getattr(live, name)[None, c]
        return out

    @property
    def drops_keys(self) -> bool:
        """Whether keys are left out: the cut's softmax then runs over fewer keys than the model's."""
        return self.n_k < self.k_total


def cut(live: LiveHead, tokens: int = SHOWN_TOKENS, columns: int = SHOWN_COLUMNS) -> Cut:
    """The first ``tokens`` queries and keys and the first ``columns`` of the ``d_k`` columns (fewer when the head has
    fewer); ``ValueError`` for ``tokens`` or ``columns`` below 1."""
    if tokens < 1 or columns < 1:
        raise ValueError("a cut needs at least one token and one column")
    n_q, n_k = live.q.shape[0], live.k.shape[0]
    return Cut(min(tokens, n_q), min(tokens, n_k), min(columns, live.d_k), min(columns, live.d_model), n_q, n_k)


def npz_bytes(live: LiveHead, q_tokens, k_tokens) -> bytes:
    """Every array of ``live`` and its token labels as a NumPy ``.npz`` file (float64; load with ``numpy.load``)."""
    import io

    buf = io.BytesIO()
    arrays = {
        name: getattr(live, name)
        for name in ("x_q", "x_kv", "w_q", "w_k", "w_v", "b_q", "b_k", "b_v", "w_o", "q", "k", "v", "weights")
    }
    np.savez(
        buf,
        **arrays,
        output=live.output,
        q_tokens=np.array(list(q_tokens)),
        k_tokens=np.array(list(k_tokens)),
        kind=np.array(live.kind),
        layer=np.array(live.layer + 1),
        head=np.array(live.head + 1),
    )
    return buf.getvalue()


def score_split(live: LiveHead, n_cols: int, i: int, j: int) -> tuple[float, float]:
    """``(q_i · k_j over all d_k columns, over the first n_cols)``: the unscaled score of query ``i`` and key ``j``,
    and the part the cut's columns give."""
    return float(live.q[i] @ live.k[j]), float(live.q[i, :n_cols] @ live.k[j, :n_cols])
