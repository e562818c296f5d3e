"""Gradient × input and integrated gradients of the chosen token's log-probability, through Captum.

The function explained is ``F(e) = log p(token | src, prefix)`` (natural log) with ``e`` the token embeddings of
the source and of the prefix (``model.embed``'s output, before the √d_model scale and the positional encoding,
which stay as they are: a baseline removes what the tokens are, not where they are):

* gradient × input (Shrikumar et al. 2016; Captum's ``InputXGradient``): ``e · ∂F/∂e``;
* integrated gradients (Sundararajan et al. 2017, eq. 1; Captum's ``IntegratedGradients``):
  ``(e − e′) · ∫₀¹ ∂F(e′ + a(e − e′))/∂e da``, the integral by ``n_steps`` Gauss–Legendre points, the points
  computed ``internal_batch_size`` at a time. Completeness (their Proposition 1): the attributions sum to
  ``F(e) − F(e′)``; what they miss by is reported as :attr:`GradientReading.completeness_gap`.

A token's score is the sum over the embedding dimension (signed, nats): positive where the token raised the
chosen token's log-probability. Captum is imported inside the functions: importing it takes ~0.4 s and brings
matplotlib (a dependency Captum declares), which no page that does not attribute should pay for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.transformer import Transformer

from .step import Step, TokenScores, token_log_probs

BASELINES = ("pad", "unk", "zero")
#: Gauss–Legendre points: enough for a smooth model (the GELU test model's gap is under 1 %) and a step of the
#: shipped translator within a second on one thread; its ReLU path has steep stretches that need more points for a
#: small gap (median 6.7 % at 24, 2.7 % at 128; docs/attribution.md), which is why every reading returns its gap.
DEFAULT_STEPS = 24


@dataclass(frozen=True)
class GradientReading:
    """Gradient × input and integrated gradients for one step.

    Attributes:
        grad_x_input / integrated_gradients: the two methods' :class:`TokenScores` (signed, nats).
        log_prob: ``F(e)``, the chosen token's log-probability (nats).
        baseline_log_prob: ``F(e′)`` at the baseline.
        completeness_gap: ``|Σ attributions − (F(e) − F(e′))| / |F(e) − F(e′)|`` (0.01 = 1 %; ``inf`` when
            ``F(e) = F(e′)`` and the attributions do not sum to 0).
        n_steps: the integration points used; baseline: one of :data:`BASELINES`.
    """

    grad_x_input: TokenScores
    integrated_gradients: TokenScores
    log_prob: float
    baseline_log_prob: float
    completeness_gap: float
    n_steps: int
    baseline: str

    @property
    def source_share(self) -> float:
        """How much of the prediction came from the source rather than the prefix: the integrated gradients'
        ``Σ_src |s_j| / (Σ_src |s_j| + Σ_prefix |s_j|)`` over per-token scores, in [0, 1] (0 for a decoder-only
        model). Absolute values, since signed totals of the two sides can cancel."""
        src = np.abs(self.integrated_gradients.source).sum()
        total = src + np.abs(self.integrated_gradients.prefix).sum()
        return float(src / total) if total > 0 else 0.0


def _embeddings(model: Transformer, ids: tuple[torch.Tensor | None, torch.Tensor], baseline: str
                ) -> tuple[tuple[torch.Tensor, ...], tuple]:
    """``(inputs, baselines)``: the token embeddings ``[1, n, d_model]`` per side (source first, when there is
    one), detached, and the baseline of each: zeros, or the ``<pad>`` (``<unk>``) row at every position."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    with torch.no_grad():
        inputs = tuple(model.embed(side).detach().requires_grad_() for side in ids if side is not None)
        row = model.embed.weight[model.cfg.unk_id if baseline == "unk" else model.cfg.pad_id].detach()
    bases = tuple(torch.zeros_like(e) if baseline == "zero" else row.expand_as(e).clone() for e in inputs)
    return inputs, bases


def _scores(method: str, attributions: tuple[torch.Tensor, ...], has_source: bool) -> TokenScores:
    """Per-token scores: each side's attribution ``[1, n, d_model]`` summed over the embedding dimension."""
    sums = [a[0].sum(dim=-1).detach().double().cpu().numpy() for a in attributions]
    return TokenScores(method, sums[0] if has_source else np.zeros(0), sums[-1])


def read_gradients(model: Transformer, step: Step, *, n_steps: int = DEFAULT_STEPS, baseline: str = "unk",
                   internal_batch_size: int | None = None) -> GradientReading:
    """Gradient × input and integrated gradients of ``log p(step.token_id)`` w.r.t. the token embeddings.

    Args:
        n_steps: integration points (Gauss–Legendre), ≥ 1.
        baseline: ``"unk"`` (the ``<unk>`` embedding at every position, the ids and so the masks unchanged: the
            same replacement :mod:`reading.faithfulness` masks with, so the attributions share out the drop from
            the step to the step with every token masked that way), ``"pad"`` (the ``<pad>`` embedding) or
            ``"zero"`` (the all-zero embedding). Zero suits only models that add a positional encoding: with RoPE
            or ALiBi every position's input is then exactly zero, where LayerNorm divides by √ε, and the path starts
            on a cliff (completeness gaps of 100 % and more on the test models).
        internal_batch_size: points evaluated in one forward/backward pass; ``None`` = all ``n_steps`` at once
            (fastest; memory grows with it).

    Gradients flow only to detached copies of the embeddings: the model's parameters get no ``.grad`` and their
    ``requires_grad`` flags are left as they are (not switched off and back: the model is shared, and another
    thread may be running it meanwhile). Works inside ``torch.inference_mode`` too.

    Raises:
        ValueError: the step does not fit the model (:meth:`Step.check`), an unknown baseline, ``n_steps < 1``.
    """
    from captum.attr import InputXGradient, IntegratedGradients

    step.check(model)
    if n_steps < 1:
        raise ValueError(f"n_steps must be at least 1, got {n_steps}")
    with torch.inference_mode(False), torch.enable_grad():  # ids made inside: a caller's inference mode is not ours
        src, tgt = step.tensors(model)
        inputs, bases = _embeddings(model, (src, tgt), baseline)

        def forward(*embeddings: torch.Tensor) -> torch.Tensor:
            return token_log_probs(model, src, tgt, step.token_id, embeddings)

        gxi = InputXGradient(forward).attribute(inputs)
        ig = IntegratedGradients(forward).attribute(inputs, baselines=bases, n_steps=n_steps,
                                                    internal_batch_size=internal_batch_size)
        with torch.no_grad():  # both ends in one pass (Captum's own convergence delta would run them again)
            ends = forward(*(torch.cat([x, b]) for x, b in zip(inputs, bases)))
    has_source = src is not None
    log_prob, base_log_prob = float(ends[0]), float(ends[1])
    change = log_prob - base_log_prob
    total = sum(float(a.detach().sum()) for a in ig)
    # relative to the change it shares out; with no change at all any attribution is a whole miss
    gap = abs(total - change) / abs(change) if change else (0.0 if total == 0 else float("inf"))
    return GradientReading(_scores("grad_x_input", gxi, has_source),
                           _scores("integrated_gradients", ig, has_source),
                           log_prob, base_log_prob, gap, n_steps, baseline)
