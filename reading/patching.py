"""What if one input token were another: the step's next-token distribution and every head's output, before and after.

Activation patching in its simplest form: the same step is read twice, once as it was and once with some source
(or, for a decoder-only model, prompt) ids changed — a word replaced by another or masked by ``<unk>`` — and the
two readings are compared at the last prefix position: the ten most probable next tokens, and in every decoder
layer the size of the change of each head's output.

A head's output for the last query is ``o^h = Σ_j α^h_j f^h(x_j)`` (Kobayashi et al. 2020, eq. 7, without the
shared bias ``b_O``): its part of the attention module's output, in the units of the residual stream
(:func:`reading.attention_scores.weighted_values`). The change is ``‖o^h(changed) − o^h(original)‖``. Both
readings are traces of the step (:func:`reading.trace.trace_pair`, each head's recorded output through its rows of
Wᴼ); nothing of the model is changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.transformer import Transformer
from reading.attention_scores import through_output
from reading.lens import lens_log_probs
from reading.step import Step, frozen_array
from reading.trace import Trace, trace_pair

#: Next tokens listed before and after.
TOP_K = 10


class _FrozenArrays:
    """Makes a frozen dataclass's array fields read-only copies: results are shared, so nothing may change them."""

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:  # type: ignore[attr-defined]
            if isinstance(getattr(self, name), np.ndarray):
                object.__setattr__(self, name, frozen_array(getattr(self, name)))


@dataclass(frozen=True)
class StepOutputs(_FrozenArrays):
    """What one step's last prefix position produces.

    Attributes:
        top_ids / top_probs: the ``k`` most probable next tokens and their probabilities, most probable first.
        token_prob: the probability of the step's ``token_id``.
        self_heads: ``(layers, heads, d_model)`` each self-attention head's output ``o^h``.
        cross_heads: ``(layers, heads, d_model)`` each cross-attention head's output (``(layers, heads, 0)`` for a
            decoder-only model).
    """

    top_ids: tuple[int, ...]
    top_probs: tuple[float, ...]
    token_prob: float
    self_heads: np.ndarray
    cross_heads: np.ndarray


def _frozen32(values) -> np.ndarray:
    """A float32 copy that refuses writes (the trace's own precision: ``Wᴼ`` applied to it later gives what it
    gives applied to the trace)."""
    arr = np.array(values, dtype=np.float32)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class LastQuery:
    """What :func:`what_if` reads of a step as it is, taken from the step's trace: small (for ``en-de`` 18 kB against
    the 220 kB of its :class:`StepOutputs`), so that it can be kept beside the step's attribution, which traces the
    same step (:attr:`reading.attribution.StepAttribution.last`), and a what-if need not trace it again.

    Attributes:
        top_ids / top_probs / token_prob: as in :class:`StepOutputs`.
        self_heads / cross_heads: ``(layers, heads, d_k)`` each head's ``Σ_j α_j v_j`` at the last query, before
            Wᴼ (float32; ``(layers, heads, 0)`` cross for a decoder-only model).
    """

    top_ids: tuple[int, ...]
    top_probs: tuple[float, ...]
    token_prob: float
    self_heads: np.ndarray
    cross_heads: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "self_heads", _frozen32(self.self_heads))
        object.__setattr__(self, "cross_heads", _frozen32(self.cross_heads))

    @property
    def k(self) -> int:
        return len(self.top_ids)

    @torch.inference_mode()
    def outputs(self, model: Transformer) -> StepOutputs:
        """The :class:`StepOutputs` of the step: each head's vector through its rows of ``model``'s Wᴼ (no forward
        pass)."""

        def through(heads: np.ndarray, modules) -> np.ndarray:
            if not heads.shape[-1]:
                return np.zeros((len(model.decoder_layers), model.cfg.n_heads, 0))
            out = [_head_outputs(module, torch.from_numpy(heads[i].copy())) for i, module in enumerate(modules)]
            return torch.stack(out).float().cpu().numpy()

        return StepOutputs(
            self.top_ids,
            self.top_probs,
            self.token_prob,
            through(self.self_heads, [layer.self_attn for layer in model.decoder_layers]),
            through(self.cross_heads, [layer.cross_attn for layer in model.decoder_layers]),
        )


@torch.inference_mode()
def last_query(model: Transformer, step: Step, trace: Trace, k: int = TOP_K) -> LastQuery:
    """The :class:`LastQuery` of ``step`` read from ``trace``, its trace (:func:`reading.trace.trace_pair` of its
    source and prefix ids; not checked).

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    self_kind, n_layers = model.cfg.decoder_self_kind, len(model.decoder_layers)
    last = lambda kind: [trace.module(kind, i).heads[:, -1] for i in range(n_layers)]  # noqa: E731
    cross = (
        torch.stack(last("cross")).numpy()
        if model.cfg.is_encoder_decoder
        else np.zeros((n_layers, model.cfg.n_heads, 0))
    )
    probs = lens_log_probs(model, trace.streams["decoder"][-1, -1].to(model.device)).exp().cpu()
    top = torch.topk(probs, min(k, probs.numel()))
    return LastQuery(
        tuple(int(i) for i in top.indices),
        tuple(float(p) for p in top.values),
        float(probs[step.token_id]),
        torch.stack(last(self_kind)).numpy(),
        cross,
    )


def read_outputs(model: Transformer, step: Step, k: int = TOP_K) -> StepOutputs:
    """The next-token distribution's top ``k`` and every decoder head's output at the last prefix position (one
    traced pass).

    Raises:
        ValueError: the step does not fit the model (:meth:`Step.check`), or ``k < 1``.
    """
    step.check(model)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    trace = trace_pair(model, None, list(step.src_ids) or None, list(step.prefix_ids))
    return last_query(model, step, trace, k).outputs(model)


def _head_outputs(module, heads: torch.Tensor) -> torch.Tensor:
    """``o^h = Σ_j α_j f^h(x_j)`` of every head from its ``Σ_j α_j v_j`` ``[heads, d_k]``: ``[heads, d_model]``."""
    return through_output(module, heads[:, None].to(module.out_proj.weight.device))[:, 0]


@dataclass(frozen=True)
class WhatIf(_FrozenArrays):
    """One step read as it was and with some input ids changed.

    Attributes:
        before / after: the two :class:`StepOutputs`.
        self_change / cross_change: ``(layers, heads)`` ``‖o^h(after) − o^h(before)‖`` of each self- and
            cross-attention head (``(layers, 0)``-shaped cross for a decoder-only model).
    """

    before: StepOutputs
    after: StepOutputs
    self_change: np.ndarray
    cross_change: np.ndarray


def what_if(model: Transformer, step: Step, changed: Step, k: int = TOP_K, last: LastQuery | None = None) -> WhatIf:
    """``step`` beside ``changed`` (the same step with other source or prefix ids; lengths may differ).

    Args:
        last: ``step``'s :class:`LastQuery` when the caller has it (its attribution's
            :attr:`~reading.attribution.StepAttribution.last`): ``step`` is then not traced again.

    Raises:
        ValueError: either step does not fit the model, ``k < 1``, or ``last`` kept another number of tokens.
    """
    if last is None:
        before = read_outputs(model, step, k)
    else:
        step.check(model)
        if last.k != min(k, model.cfg.vocab_size):
            raise ValueError(f"the step's last query kept {last.k} next tokens, the what-if lists {k}")
        before = last.outputs(model)
    after = read_outputs(model, changed, k)

    def change(a, b):
        """Each head's ‖Δ output‖: two ``(layers, heads, d)`` arrays → ``(layers, heads)``; none for no heads."""
        return np.linalg.norm(a - b, axis=-1) if a.shape[-1] else np.zeros((a.shape[0], 0))

    return WhatIf(
        before, after, change(after.self_heads, before.self_heads), change(after.cross_heads, before.cross_heads)
    )


def masked(ids, positions, unk_id: int) -> tuple[int, ...]:
    """``ids`` with the ``positions`` replaced by ``unk_id`` (the masking of :mod:`reading.faithfulness`: the
    position stays, what the token was goes)."""
    drop = set(positions)
    return tuple(unk_id if i in drop else int(t) for i, t in enumerate(ids))
