"""The optimiser of Vaswani et al. (2017), §5.3: Adam (β₁ 0.9, β₂ 0.98, ε 1e-9) and the warmup +
inverse-square-root learning rate of eq. (3), with the offset and re-warmup a warm start needs, and an optional
linear cooldown at the end."""

from __future__ import annotations

from typing import Any

import torch

from training.config import TrainConfig


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Learning rate of paper eq. (3): ``factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)`` (step ≥ 1;
    step 0 counts as 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
    """The ``factor`` of :func:`noam_lr` whose maximum (at ``step = warmup``) equals ``peak_lr``."""
    return peak_lr / noam_lr(warmup, d_model, warmup)


def learning_rate(step: int, d_model: int, config: TrainConfig, factor: float) -> float:
    """The learning rate of optimizer step ``step`` (≥ 1): :func:`noam_lr` at ``step + config.lr_step_offset``
    (with ``config.warmup``), times a linear re-warmup ``min(1, step / config.rewarmup)`` when the offset is non-zero
    (a warm start's fresh Adam moments must not take full-size steps at once), times :func:`cooldown_factor` when
    ``config.cooldown_steps`` is set."""
    offset = config.lr_step_offset or 0
    lr = noam_lr(step + offset, d_model, config.warmup, factor)
    if offset and config.rewarmup:
        lr *= min(1.0, step / config.rewarmup)
    cooldown = config.cooldown_steps
    return lr * cooldown_factor(step, config.max_steps, cooldown) if cooldown else lr


def cooldown_factor(step: int, max_steps: int, cooldown_steps: int) -> float:
    """The decay of warmup-stable-decay schedules (Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training
    Beyond Fixed Training Durations", §3): 1 until the last ``cooldown_steps`` steps before ``max_steps``, then
    linearly down to ``1 / cooldown_steps`` at step ``max_steps`` (the last step still learns). 1 when
    ``cooldown_steps`` is 0."""
    if cooldown_steps <= 0:
        return 1.0
    return max(0.0, min(1.0, (max_steps - step + 1) / cooldown_steps))


def make_optimizer(model: torch.nn.Module, weight_decay: float = 0.0, fused: bool = False) -> torch.optim.Optimizer:
    """Adam (β₁ 0.9, β₂ 0.98, ε 1e-9; paper §5.3), its learning rate set per step. With ``weight_decay`` > 0:
    AdamW (Loshchilov & Hutter 2019), the decay applied to the weight matrices only (parameters of ≥ 2
    dimensions: projections and the tied embedding), not to biases and LayerNorm gains, in a second group.

    ``fused``: torch's single-kernel implementation (CUDA, and CPU since torch 2.4): the same update rule, one
    launch for all parameters instead of a handful per parameter group; it needs floating-point parameters on one
    device kind, else torch raises ``RuntimeError``."""
    kw: dict[str, Any] = {"lr": 0.0, "betas": (0.9, 0.98), "eps": 1e-9, **({"fused": True} if fused else {})}
    if not weight_decay:
        return torch.optim.Adam(model.parameters(), **kw)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}], **kw
    )
