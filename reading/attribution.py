"""Attention beside attribution for one decoding step: every method's share of each source and prefix token.

:func:`attribute_step` runs the four methods on the same step and returns them frozen, side by side:

=======================  ==========================================================  ===========================
method                   score of token j for the chosen token y                     from
=======================  ==========================================================  ===========================
``attention``            α_ij, the last query row (cross: source, self: prefix)       the traced forward pass
``value_norm``           ``‖α_ij f(x_j)‖``, ``f(x) = (x W_V + b_V) W_O``             Kobayashi et al. 2020
``grad_x_input``         ``Σ_d e_jd ∂log p(y)/∂e_jd``                                Shrikumar et al. 2016
``integrated_gradients`` ``Σ_d (e − e′)_jd ∫ ∂log p(y)/∂e_jd``                       Sundararajan et al. 2017
=======================  ==========================================================  ===========================

Only the gradient methods explain ``log p(y)`` itself; the attention methods say where one sub-layer looked.
Nothing of the model is changed (no hooks, no ``.grad``, no mode switch); a model in training mode is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.transformer import Transformer
from reading.attention_scores import AttentionReading, read_attention
from reading.gradients import DEFAULT_STEPS, TOLERANCE, GradientReading, read_gradients
from reading.patching import LastQuery, last_query
from reading.step import Step, TokenScores
from reading.trace import trace_pair

METHODS = ("attention", "value_norm", "grad_x_input", "integrated_gradients")


@dataclass(frozen=True)
class StepAttribution:
    """Every method's reading of one step (frozen; its arrays refuse writes).

    Attributes:
        step: the :class:`~reading.step.Step` read.
        attention: weights and value norms of every layer and head (:class:`AttentionReading`).
        gradients: gradient × input and integrated gradients (:class:`GradientReading`).
        last: the step's next tokens and each head's output at the last query, from the same trace as
            ``attention`` (:class:`reading.patching.LastQuery`, a few kB): what a what-if of this step reads of it
            as it is (:func:`reading.patching.what_if`), so that it need not trace the step again.
    """

    step: Step
    attention: AttentionReading
    gradients: GradientReading
    last: LastQuery | None = None

    def scores(self, method: str, layer: int | None = None, head: int | None = None) -> TokenScores:
        """One method's :class:`TokenScores`. ``layer`` / ``head`` choose the attention methods' layer and head
        (``None``: the mean over layers; over heads for ``attention``, the heads together for ``value_norm``);
        the gradient methods ignore them.

        Raises:
            ValueError: an unknown method. IndexError: ``layer`` or ``head`` out of range.
        """
        if method == "attention":
            return self.attention.weights(layer, head)
        if method == "value_norm":
            return self.attention.norms(layer, head)
        if method == "grad_x_input":
            return self.gradients.grad_x_input
        if method == "integrated_gradients":
            return self.gradients.integrated_gradients
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")

    def all_scores(self, layer: int | None = None, head: int | None = None) -> dict[str, TokenScores]:
        """``{method: TokenScores}`` for every method of :data:`METHODS`, in that order."""
        return {m: self.scores(m, layer, head) for m in METHODS}

    @property
    def source_share(self) -> float:
        """The share of the prediction owed to the source rather than to the prefix, in [0, 1]
        (:attr:`GradientReading.source_share`; 0 for a decoder-only model)."""
        return self.gradients.source_share


def attribute_step(
    model: Transformer,
    src_ids,
    prefix_ids,
    token_id: int,
    *,
    n_steps: int = DEFAULT_STEPS,
    baseline: str = "unk",
    internal_batch_size: int | None = None,
    tolerance: float | None = TOLERANCE,
) -> StepAttribution:
    """Read one step by every method.

    Args:
        model: an encoder-decoder or decoder-only :class:`~model.transformer.Transformer` in eval mode.
        src_ids: source ids ``(S,)`` (``None`` or empty for a decoder-only model); prefix_ids: the decoder inputs
            ``(T,)``, ``<bos>`` first; token_id: the token chosen after them.
        n_steps, baseline, internal_batch_size, tolerance: integrated gradients'
            (:func:`reading.gradients.read_gradients`).

    Raises:
        ValueError: the step does not fit the model (:meth:`Step.check`), a bad baseline or ``n_steps``.
    """
    step = Step(tuple(src_ids or ()), tuple(prefix_ids), token_id)
    step.check(model)
    trace = trace_pair(model, None, list(step.src_ids) or None, list(step.prefix_ids))  # read twice here
    attention, last = read_attention(model, step, trace), last_query(model, step, trace)
    # both are copies: the trace (28 MB for the longest pair) is let go before the gradients' passes take theirs
    del trace
    gradients = read_gradients(
        model,
        step,
        n_steps=n_steps,
        baseline=baseline,
        internal_batch_size=internal_batch_size,
        tolerance=tolerance,
    )
    return StepAttribution(step, attention, gradients, last)


def source_shares(
    model: Transformer, src_ids, output_ids, *, bos_id: int | None = None, n_steps: int = DEFAULT_STEPS
) -> tuple[float, ...]:
    """The source share (:attr:`StepAttribution.source_share`) of each step of a decoding: step t predicts
    ``output_ids[t]`` from ``<bos> + output_ids[:t]``. Costs one integrated-gradients run per step.

    Args:
        output_ids: the tokens the decoder wrote (without ``<bos>``); bos_id: ``model.cfg.bos_id`` when ``None``.
    """
    bos = model.cfg.bos_id if bos_id is None else bos_id
    prefix = [bos] + list(output_ids)
    return tuple(
        read_gradients(model, Step(tuple(src_ids or ()), tuple(prefix[: t + 1]), token), n_steps=n_steps).source_share
        for t, token in enumerate(output_ids)
    )
