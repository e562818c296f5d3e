"""Gradient × input and integrated gradients of the chosen token's log-probability, through Captum.

The function explained is ``F(e) = log p(token | src, prefix)`` (natural log) with ``e`` the token embeddings of
the source and of the prefix (``model.embed``'s output, before the √d_model scale and the positional encoding,
which stay as they are: a baseline removes what the tokens are, not where they are):

* gradient × input (Shrikumar et al. 2016; Captum's ``InputXGradient``): ``e · ∂F/∂e``;
* integrated gradients (Sundararajan et al. 2017, eq. 1; Captum's ``IntegratedGradients``):
  ``(e − e′) · ∫₀¹ ∂F(e′ + a(e − e′))/∂e da``, the integral by Gauss–Legendre points. Completeness (their
  Proposition 1): the attributions sum to ``F(e) − F(e′)``; what they miss by is
  :attr:`GradientReading.completeness_gap`.

A ReLU model's path has steep stretches where a few uniform points miss the integral by 10–50 % (the shipped
translator: median 13 % at 24 points, docs/attribution.md). The integral is therefore taken piecewise (adaptive
quadrature): the path integral is additive over stretches ``[a, b]`` of ``[0, 1]``, each stretch one Captum call's
row with the path's points at ``a`` and ``b`` as baseline and input, so every stretch has a completeness check of
its own, ``Σ attributions = F(b) − F(a)``. The stretches start where ``F`` changes most (read from a cheap grid of
forward passes), and the worst ones are halved until the whole gap is under ``tolerance`` or the points reach
``max_steps``.

A token's score is the sum over the embedding dimension (signed, nats): positive where the token raised the
chosen token's log-probability. Captum is imported inside the functions: importing it takes ~0.4 s and brings
matplotlib (a dependency Captum declares), which no page that does not attribute should pay for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.transformer import Transformer
from reading.step import Step, TokenScores, token_log_probs

BASELINES = ("pad", "unk", "zero")
#: Gauss–Legendre points to start with (``POINTS_PER_STRETCH`` per stretch of the path).
DEFAULT_STEPS = 24
#: Points per stretch: few, since a stretch is short and refining halves stretches rather than adding points.
POINTS_PER_STRETCH = 4
#: Completeness gap the adaptive integral stops at (1 %), and the most points it may use.
TOLERANCE, MAX_STEPS = 0.01, 256
#: A round halves the stretches that miss by at least this share of the worst one's miss (on the shipped
#: translator: 50 gradient evaluations a step on average against 79 when the worst third is halved).
SPLIT_SHARE = 0.5
#: Forward passes (no gradients) that show where along the path ``F`` changes, to place the first stretches (12: as
#: good a placement as 24 on the lecture steps, every gap under 1 %, at 13 % less time).
GRID = 12
#: Share of the first stretches placed uniformly rather than by the change of ``F`` (no stretch of length zero).
UNIFORM_SHARE = 0.3
#: Token positions (points of the path × the step's source and prefix tokens) one forward and backward pass of
#: the integral carries when a caller bounds it with :func:`pass_rows`. What a pass keeps for its backward pass grows
#: with them (~0.18 MB a position on the shipped translator, ~49 MB for one row of 255 positions): the last step of a
#: 128-piece sentence (128 + 127 positions) read with every point in one pass (24 rows) took 683 MB while it ran,
#: 161 MB in passes of 512 positions (2 rows), 94 MB in passes of 256 (1 row), in the same time (11.3 and 10.6 s on
#: one thread). 256 keeps a step's reading within the heavy-work gate's :data:`serving.memory.WORK_BYTES`. The forward
#: passes without gradients that place the stretches are bounded by the same rows: the 13-point grid in one pass took
#: the process 73-104 MB above its memory for that step, 59 MB in passes of 2 rows, in the same time (~21 s there).
PASS_TOKENS = 256


@dataclass(frozen=True)
class GradientReading:
    """Gradient × input and integrated gradients for one step.

    Attributes:
        grad_x_input / integrated_gradients: the two methods' :class:`TokenScores` (signed, nats).
        log_prob: ``F(e)``, the chosen token's log-probability (nats).
        baseline_log_prob: ``F(e′)`` at the baseline.
        completeness_gap: ``|Σ attributions − (F(e) − F(e′))| / |F(e) − F(e′)|`` (0.01 = 1 %; ``inf`` when
            ``F(e) = F(e′)`` and the attributions do not sum to 0).
        n_steps: the integration points the attributions are made of; baseline: one of :data:`BASELINES`.
        evaluated: gradient evaluations spent, refined-away stretches included (the cost; ``n_steps`` when the
            integral was not refined).
    """

    grad_x_input: TokenScores
    integrated_gradients: TokenScores
    log_prob: float
    baseline_log_prob: float
    completeness_gap: float
    n_steps: int
    baseline: str
    evaluated: int = 0

    @property
    def source_share(self) -> float:
        """How much of the prediction came from the source rather than the prefix: the integrated gradients'
        ``Σ_src |s_j| / (Σ_src |s_j| + Σ_prefix |s_j|)`` over per-token scores, in [0, 1] (0 for a decoder-only
        model). Absolute values, since signed totals of the two sides can cancel."""
        src = np.abs(self.integrated_gradients.source).sum()
        total = src + np.abs(self.integrated_gradients.prefix).sum()
        return float(src / total) if total > 0 else 0.0


def _embeddings(
    model: Transformer, ids: tuple[torch.Tensor | None, torch.Tensor], baseline: str
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


class _Path:
    """The straight path ``e′ + a (e − e′)``, ``a`` in [0, 1], for every side's embeddings, and ``F`` along it,
    read ``rows`` points a pass (``None``: all at once)."""

    def __init__(
        self, forward, inputs: tuple[torch.Tensor, ...], bases: tuple[torch.Tensor, ...], rows: int | None = None
    ):
        self.forward, self.bases, self.rows = forward, tuple(b.detach() for b in bases), rows
        self.diff = tuple((x - b).detach() for x, b in zip(inputs, bases, strict=True))

    def at(self, alphas) -> tuple[torch.Tensor, ...]:
        """Every side's embeddings at ``alphas``, one batch row each: ``[len(alphas), n, d_model]``."""
        return tuple(torch.cat([b + float(a) * d for a in alphas]) for b, d in zip(self.bases, self.diff, strict=True))

    def values(self, alphas) -> list[float]:
        """``F`` at ``alphas`` (forward passes of at most ``rows`` points, no gradients): the grid that places the
        first stretches is 13 points, which in one pass held more than a pass of the integral with its gradients."""
        alphas = list(alphas)
        rows = len(alphas) if self.rows is None else max(1, self.rows)
        out: list[float] = []
        with torch.no_grad():
            for start in range(0, len(alphas), rows):
                out += self.forward(*self.at(alphas[start : start + rows])).double().tolist()
        return out


def _first_edges(path: _Path, stretches: int) -> tuple[list[float], dict[float, float]]:
    """Edges of the first ``stretches`` stretches, dense where ``F`` changes most on a grid of :data:`GRID` steps,
    and ``F`` at the grid points and edges."""
    grid = np.linspace(0.0, 1.0, GRID + 1)
    f = np.array(path.values(grid))
    change = np.concatenate([[0.0], np.cumsum(np.abs(np.diff(f)))])
    where = UNIFORM_SHARE * grid + (1 - UNIFORM_SHARE) * (change / change[-1] if change[-1] > 0 else grid)
    inner = [float(np.interp(q, where, grid)) for q in np.linspace(0.0, 1.0, stretches + 1)[1:-1]]
    edges = sorted({0.0, 1.0, *inner})
    values = dict(zip(grid.tolist(), f.tolist(), strict=True))
    missing = [e for e in edges if e not in values]
    values.update(zip(missing, path.values(missing) if missing else [], strict=True))
    return edges, values


def _integrate(path: _Path, stretches: list[tuple[float, float]], n: int) -> list[tuple]:
    """Integrated gradients over each stretch ``(a, b)``, a batch row per stretch: one Captum call when the path's
    ``rows`` is ``None`` or holds a row of every stretch, else one call per ``rows`` stretches (Captum never carries
    fewer rows in a pass than its call has stretches, so a bound below that is kept by calling it on fewer)."""
    from captum.attr import IntegratedGradients

    ig = IntegratedGradients(path.forward)
    batch = path.rows
    per_call = len(stretches) if batch is None else max(1, min(len(stretches), batch))
    out: list[tuple] = []
    for start in range(0, len(stretches), per_call):
        part = stretches[start : start + per_call]
        attributions = ig.attribute(
            path.at([b for _, b in part]),
            baselines=path.at([a for a, _ in part]),
            n_steps=n,
            internal_batch_size=None if batch is None else max(batch, len(part)),
        )
        out.extend(tuple(a[j : j + 1].detach() for a in attributions) for j in range(len(part)))
    return out


def pass_rows(step: Step, tokens: int = PASS_TOKENS) -> int:
    """Points of the path that one forward and backward pass may carry for ``step`` (its source and prefix tokens)
    so that the pass holds at most ``tokens`` token positions: ``internal_batch_size`` for :func:`read_gradients`,
    at least 1 (≥ 1).

    Raises:
        ValueError: ``tokens`` < 1.
    """
    if tokens < 1:
        raise ValueError(f"tokens must be at least 1, got {tokens}")
    return max(1, tokens // max(1, len(step.src_ids) + len(step.prefix_ids)))


def _adaptive(path: _Path, n_steps: int, tolerance: float, max_steps: int) -> tuple[tuple[torch.Tensor, ...], int, int]:
    """Integrated gradients over stretches refined until the completeness gap is under ``tolerance`` (or the points
    reach ``max_steps``): ``(attributions per side, points used, gradient evaluations spent)``."""
    n = POINTS_PER_STRETCH
    edges, f = _first_edges(path, max(1, n_steps // n))
    stretches = list(zip(edges[:-1], edges[1:], strict=True))
    parts = dict(zip(stretches, _integrate(path, stretches, n), strict=True))
    change, spent = f[1.0] - f[0.0], n * len(stretches)
    while True:
        miss = {s: sum(float(t.sum()) for t in parts[s]) - (f[s[1]] - f[s[0]]) for s in stretches}
        if abs(sum(miss.values())) <= tolerance * abs(change) or n * (len(stretches) + 1) > max_steps:
            break
        room = (max_steps - n * len(stretches)) // n  # each halving adds one stretch
        top = max(abs(v) for v in miss.values())
        worst = sorted((s for s in stretches if abs(miss[s]) >= SPLIT_SHARE * top), key=lambda s: -abs(miss[s]))
        worst = worst[: max(1, room)]
        mids = [(a + b) / 2 for a, b in worst]
        f.update(zip(mids, path.values(mids), strict=True))
        halves = [h for (a, b), m in zip(worst, mids, strict=True) for h in ((a, m), (m, b))]
        parts.update(zip(halves, _integrate(path, halves, n), strict=True))
        stretches = sorted(set(stretches) - set(worst) | set(halves))
        spent += n * len(halves)
    sides = len(path.bases)
    return tuple(sum(parts[s][i] for s in stretches) for i in range(sides)), n * len(stretches), spent


def read_gradients(
    model: Transformer,
    step: Step,
    *,
    n_steps: int = DEFAULT_STEPS,
    baseline: str = "unk",
    internal_batch_size: int | None = None,
    tolerance: float | None = TOLERANCE,
    max_steps: int = MAX_STEPS,
) -> GradientReading:
    """Gradient × input and integrated gradients of ``log p(step.token_id)`` w.r.t. the token embeddings.

    Args:
        n_steps: integration points (Gauss–Legendre) to start with, ≥ 1.
        tolerance: the completeness gap the integral is refined to (module docstring), with at most ``max_steps``
            points; ``None``: one stretch of ``n_steps`` points, never refined (the textbook integral).
        baseline: ``"unk"`` (the ``<unk>`` embedding at every position, the ids and so the masks unchanged: the
            same replacement :mod:`reading.faithfulness` masks with, so the attributions share out the drop from
            the step to the step with every token masked that way), ``"pad"`` (the ``<pad>`` embedding) or
            ``"zero"`` (the all-zero embedding). Zero suits only models that add a positional encoding: with RoPE
            or ALiBi every position's input is then exactly zero, where LayerNorm divides by √ε, and the path starts
            on a cliff (completeness gaps of 100 % and more on the test models).
        internal_batch_size: points evaluated in one forward/backward pass; ``None`` = all ``n_steps`` at once
            (memory grows with it: a server bounds it with :func:`pass_rows`).

    Gradients flow only to detached copies of the embeddings: the model's parameters get no ``.grad`` and their
    ``requires_grad`` flags are left as they are (not switched off and back: the model is shared, and another
    thread may be running it meanwhile). Works inside ``torch.inference_mode`` too.

    Raises:
        ValueError: the step does not fit the model (:meth:`Step.check`), an unknown baseline, ``n_steps < 1``.
    """
    from captum.attr import InputXGradient

    step.check(model)
    if n_steps < 1:
        raise ValueError(f"n_steps must be at least 1, got {n_steps}")
    with torch.inference_mode(False), torch.enable_grad():  # ids made inside: a caller's inference mode is not ours
        src, tgt = step.tensors(model)
        inputs, bases = _embeddings(model, (src, tgt), baseline)

        def forward(*embeddings: torch.Tensor) -> torch.Tensor:
            return token_log_probs(model, src, tgt, step.token_id, embeddings)

        gxi = InputXGradient(forward).attribute(inputs)
        path = _Path(forward, inputs, bases, internal_batch_size)
        if tolerance is None:
            ig, points, spent = _integrate(path, [(0.0, 1.0)], n_steps)[0], n_steps, n_steps
        else:
            ig, points, spent = _adaptive(path, n_steps, tolerance, max(max_steps, n_steps))
        with torch.no_grad():  # both ends in one pass (Captum's own convergence delta would run them again)
            ends = forward(*(torch.cat([x, b]) for x, b in zip(inputs, bases, strict=True)))
    has_source = src is not None
    log_prob, base_log_prob = float(ends[0]), float(ends[1])
    change = log_prob - base_log_prob
    total = sum(float(a.detach().sum()) for a in ig)
    # relative to the change it shares out; with no change at all any attribution is a whole miss
    gap = abs(total - change) / abs(change) if change else (0.0 if total == 0 else float("inf"))
    return GradientReading(
        _scores("grad_x_input", gxi, has_source),
        _scores("integrated_gradients", ig, has_source),
        log_prob,
        base_log_prob,
        gap,
        points,
        baseline,
        spent,
    )
