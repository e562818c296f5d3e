"""The logit lens (nostalgebraist 2020): what each decoder layer would predict if the model stopped there.

After decoder layer ``l`` the residual stream ``h_l`` (``[d_model]`` at the newest position) is read out the way
the model reads out its last one, :meth:`model.transformer.Transformer.next_token_logits`:

* **pre-LN** (``cfg.norm_first``: our ``en-de`` and ``brown-lm``, GPT-2): the stream is never normalised inside
  the layers, and the model ends with a final LayerNorm (``decoder_norm``, GPT-2's ``ln_f``). The lens applies that
  same final LayerNorm to every layer's stream, then the output projection: ``softmax(W · LN_f(h_l) [+ b])``, as
  TransformerLens' ``accumulated_resid(apply_ln=True)`` does.
* **post-LN** (``norm_first`` off: the paper's, MarianMT): every sub-layer ends with its own LayerNorm, so a
  layer's output is already normalised and the model has no final one; the lens applies the projection alone
  (Marian's ``final_logits_bias`` included, as the model does).

Either way the ids of ``cfg.suppress_ids`` get −∞, as in the model's own choice, so at the last layer the lens
*is* the model's output distribution. Only the top ``k`` pieces and the chosen token's probability and rank are
kept per layer and step (a :class:`Lens`, frozen, a few kB): never ``[layers, vocab]`` for every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from model.transformer import Transformer
from reading.trace import Trace, streams_pair

#: Pieces per layer a :class:`Lens` keeps (the pages show five).
TOP_K = 5


@dataclass(frozen=True)
class LensStep:
    """The lens at one decoding step: for each decoder layer (first to last), what it would predict.

    Attributes:
        token_id: the token the decoding took at this step (greedy's choice, a sample, or a forced token).
        top_ids / top_probs: per layer, the ``k`` most probable ids and their probabilities, most probable first
            (``[layers][k]``).
        chosen_probs: per layer, the probability of ``token_id`` (``[layers]``, 0–1).
        chosen_ranks: per layer, the rank of ``token_id`` (1 = the layer's top guess; ``[layers]``).
    """

    token_id: int
    top_ids: tuple[tuple[int, ...], ...]
    top_probs: tuple[tuple[float, ...], ...]
    chosen_probs: tuple[float, ...]
    chosen_ranks: tuple[int, ...]

    @property
    def first_top_layer(self) -> int | None:
        """The first layer (0-based) whose top guess is the chosen token, ``None`` if none is (a sampled or forced
        token the model never ranks first)."""
        return next((layer for layer, rank in enumerate(self.chosen_ranks) if rank == 1), None)


@dataclass(frozen=True)
class Lens:
    """The logit lens over a whole decoding, one :class:`LensStep` per generated token (``<eos>`` included).

    Attributes:
        steps: one record per step, in order (step ``s`` is ``steps[s - 1]``).
        final_norm: whether the model's final LayerNorm was applied to every layer's stream (pre-LN models);
            ``False``: a post-LN model, whose layers' outputs are already normalised, read out by the projection.
        k: pieces kept per layer.
    """

    steps: tuple[LensStep, ...]
    final_norm: bool
    k: int

    @property
    def n_layers(self) -> int:
        return len(self.steps[0].chosen_probs) if self.steps else 0


def final_norm_applies(model: Transformer) -> bool:
    """Whether the lens normalises a layer's stream with the model's final LayerNorm (pre-LN models have one)."""
    return model.decoder_norm is not None


def lens_log_probs(model: Transformer, streams: torch.Tensor) -> torch.Tensor:
    """Residual streams ``[.., d_model]`` read out as the model reads its last one: the final LayerNorm where the
    model has one, the output projection with its bias and suppressed ids, a log-softmax in float32.
    Returns ``[.., vocab]`` log-probabilities."""
    if model.decoder_norm is not None:
        streams = model.decoder_norm(streams)
    return torch.log_softmax(model.next_token_logits(streams).float(), dim=-1)


def _step(log_probs: torch.Tensor, token: int, k: int) -> LensStep:
    """One step's record from its lens ``[layers, vocab]``."""
    top_p, top_i = log_probs.exp().topk(min(k, log_probs.size(-1)), dim=-1)
    chosen = log_probs[:, token]
    ranks = (log_probs > chosen[:, None]).sum(-1) + 1
    return LensStep(
        int(token),
        tuple(map(tuple, top_i.tolist())),
        tuple(map(tuple, top_p.tolist())),
        tuple(chosen.exp().tolist()),
        tuple(ranks.tolist()),
    )


@torch.inference_mode()
def lens_of(model: Transformer, trace: Trace, start: int, generated: Sequence[int], k: int = TOP_K) -> Lens:
    """The logit lens read from a trace's decoder streams: step ``s`` (1-based) reads position ``start + s − 2``,
    where the decoder had read the prefix and ``generated[:s − 1]``.

    Args:
        trace: a :class:`~reading.trace.Trace` of the decoder inputs ``prefix + generated[:-1]`` (or longer).
        start: the prefix's length (``<bos>`` plus a decoder-only model's prompt).

    Raises:
        ValueError: the trace has no decoder streams or is too short for ``generated``.
    """
    return _lens_of_streams(model, trace.streams.get("decoder"), start, generated, k)


@torch.inference_mode()
def _lens_of_streams(
    model: Transformer, streams: torch.Tensor | None, start: int, generated: Sequence[int], k: int
) -> Lens:
    """:func:`lens_of` from the decoder's streams ``[layers + 1, positions, d_model]``."""
    if streams is None or start < 1:
        raise ValueError("the lens needs a trace with the decoder's streams and a prefix")
    if start + len(generated) - 1 > streams.size(1):
        raise ValueError(
            f"the trace has {streams.size(1)} decoder positions; the lens needs {start + len(generated) - 1}"
        )
    dev = model.device
    steps = [
        _step(lens_log_probs(model, streams[1:, start - 1 + s].to(dev)).cpu(), int(token), k)
        for s, token in enumerate(generated)
    ]
    return Lens(tuple(steps), final_norm_applies(model), k)


def logit_lens(
    model: Transformer, src_ids: Sequence[int] | None, prefix: Sequence[int], generated: Sequence[int], k: int = TOP_K
) -> Lens:
    """The logit lens of a finished decoding, step by step, read from one traced pass over the decoder inputs
    ``prefix + generated[:-1]`` that records the residual streams alone (:func:`reading.trace.streams_pair`: the
    attention modules on the fast path, nothing of them kept). The pass sees every position at once where the decoding
    ran one step at a time with the KV cache: the same numbers up to float rounding, so the last layer's distribution
    is the one the decoding chose from (tested to 1e-5).

    Args:
        model: an eval-mode :class:`Transformer`.
        src_ids: the encoder's ids (``<eos>`` included); ignored by a decoder-only model (its prompt is in
            ``prefix``).
        prefix: the decoder's start (``<bos>``, plus a decoder-only model's prompt), as
            :attr:`decoding.decoded.Decoding.prefix`.
        generated: the tokens taken, as :attr:`decoding.decoded.Decoding.generated` (step ``s`` predicts
            ``generated[s - 1]`` from ``prefix + generated[:s - 1]``).
        k: pieces kept per layer.

    Returns:
        A :class:`Lens` with one step per generated token.

    Raises:
        ValueError: an encoder-decoder model without ``src_ids``, an empty ``prefix``, or more tokens than the
            model's ``max_len`` positions.
    """
    cfg = model.cfg
    if not prefix:
        raise ValueError("the lens needs the decoder's start (prefix)")
    if len(prefix) + len(generated) - 1 > cfg.max_len:
        raise ValueError(f"{len(prefix) + len(generated) - 1} decoder positions; the model has {cfg.max_len}")
    if cfg.is_encoder_decoder and not src_ids:
        raise ValueError("an encoder-decoder model needs src_ids")
    inputs = list(prefix) + [int(t) for t in generated[:-1]]
    streams = streams_pair(model, list(src_ids) if cfg.is_encoder_decoder and src_ids else None, inputs)
    return _lens_of_streams(model, streams.get("decoder"), len(prefix), generated, k)
