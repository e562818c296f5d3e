"""How faithful a ranking of the input tokens is: ERASER's comprehensiveness and sufficiency (DeYoung et al. 2020).

For the chosen token y of a step and the k tokens a method ranks highest (its rationale r):

* comprehensiveness ``p(y | x) − p(y | x \\ r)``: how much the probability drops with r masked (higher = the
  method found what the prediction needed);
* sufficiency ``p(y | x) − p(y | r)``: how much it drops with only r left (lower = r alone is enough).

k is a fraction of the tokens that may be masked (by default 10 %, 20 % and 50 %, at least one token), and each
measure is averaged over the fractions, the area over the perturbation curve (AOPC; ERASER §4 averages over bins
of 1–50 %). A seeded average over random rankings is the floor a method has to beat.

*Masking* replaces a token by ``<unk>`` and leaves the attention mask as it is: the position stays, only what the
token was is gone. ``<pad>`` would not mask but delete: the model builds its key-padding mask from the ids, so a
``<pad>`` key would vanish from every softmax and the remaining weights grow, a second change beside the missing
word. ``<unk>`` is an input the encoder knows (the tokenizer's fallback); with tied embeddings its row was trained
mostly as an output that is never right, so it carries little meaning of its own.

What may be masked: the source tokens except the final ``<eos>`` (not a word of the sentence) for an
encoder-decoder; the prefix except ``<bos>`` for a decoder-only model, which has no source.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import numpy as np
import torch

from model.transformer import Transformer
from reading.step import Step, TokenScores, token_log_probs

FRACTIONS = (0.1, 0.2, 0.5)
MEASURES = ("comprehensiveness", "sufficiency")
#: rows evaluated in one forward pass: bounds memory on long sentences without slowing short ones
_BATCH = 64
#: token positions (rows × the step's source and prefix tokens) one forward pass holds at most: 64 rows of a
#: 128-piece sentence's last step took 139 MB while they ran, 4,096 positions (16 of those rows) 66-74 MB above the
#: process's memory (6.2 s), 2,048 46 MB (6.0 s), 1,024 (4 rows) 32 MB (5.7 s): smaller passes were no slower
BATCH_TOKENS = 1024


def batch_rows(step: Step) -> int:
    """Variants of ``step`` evaluated in one forward pass: :data:`_BATCH`, fewer for a long step (at most
    :data:`BATCH_TOKENS` token positions), at least 1."""
    return max(1, min(_BATCH, BATCH_TOKENS // max(1, len(step.src_ids) + len(step.prefix_ids))))


@dataclass(frozen=True)
class Faithfulness:
    """Comprehensiveness and sufficiency of each method (and ``"random"``) at each fraction, for one step.

    Attributes:
        fractions: the fractions of the maskable tokens; counts: the k each one gives.
        probability: ``p(y | x)`` with nothing masked (a probability, not a log).
        comprehensiveness / sufficiency: method → one value per fraction (differences of probabilities).
    """

    fractions: tuple[float, ...]
    counts: tuple[int, ...]
    probability: float
    comprehensiveness: Mapping[str, tuple[float, ...]]
    sufficiency: Mapping[str, tuple[float, ...]]

    def __post_init__(self) -> None:
        for name in MEASURES:
            frozen = {m: tuple(float(v) for v in vals) for m, vals in getattr(self, name).items()}
            object.__setattr__(self, name, MappingProxyType(frozen))

    def aopc(self, measure: str, method: str) -> float:
        """The mean over the fractions of ``measure`` (``"comprehensiveness"`` or ``"sufficiency"``) for
        ``method``. Raises ``ValueError`` for an unknown measure, ``KeyError`` for an unknown method."""
        if measure not in MEASURES:
            raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
        return float(np.mean(getattr(self, measure)[method]))


def maskable(model: Transformer, step: Step) -> tuple[int, ...]:
    """Positions that may be masked: the source's but its last (``<eos>``), or a decoder-only prefix's but the
    first (``<bos>``)."""
    if model.cfg.is_encoder_decoder:
        last = len(step.src_ids) - (step.src_ids[-1] == model.cfg.eos_id)
        return tuple(range(last))
    return tuple(range(1, len(step.prefix_ids)))


def _side(model: Transformer, scores) -> np.ndarray:
    """The scores of the side being masked, from :class:`TokenScores` or an array."""
    if isinstance(scores, TokenScores):
        return scores.source if model.cfg.is_encoder_decoder else scores.prefix
    return np.asarray(scores, dtype=np.float64)


def _masked(ids: tuple[int, ...], positions, replace_id: int) -> tuple[int, ...]:
    drop = set(positions)
    return tuple(replace_id if i in drop else t for i, t in enumerate(ids))


@torch.inference_mode()
def _probabilities(model: Transformer, step: Step, variants: list[tuple[int, ...]]) -> np.ndarray:
    """``p(y)`` for each variant of the masked side (the source, or a decoder-only prefix), batched."""
    out = []
    batch = batch_rows(step)
    for start in range(0, len(variants), batch):
        rows = torch.tensor(variants[start : start + batch], device=model.device)
        src, tgt = step.tensors(model)
        if model.cfg.is_encoder_decoder:
            src = rows
        else:
            tgt = rows
        out.append(token_log_probs(model, src, tgt, step.token_id).exp().double().cpu().numpy())
    return np.concatenate(out)


def faithfulness(
    model: Transformer,
    step: Step,
    scores: Mapping[str, TokenScores | np.ndarray],
    *,
    fractions: tuple[float, ...] = FRACTIONS,
    n_random: int = 10,
    seed: int = 0,
    replace_id: int | None = None,
) -> Faithfulness:
    """Comprehensiveness and sufficiency of each method's ranking of the masked side, beside random rankings.

    Args:
        step: the step (:class:`~reading.step.Step`); its ``token_id`` is the y whose probability is watched.
        scores: method → its :class:`TokenScores` or a score per token of the masked side (``(S,)`` source for an
            encoder-decoder, ``(T,)`` prefix for a decoder-only model). Ranked by the signed score, highest
            first: a token that spoke against y is not part of the evidence for it.
        fractions: of the maskable tokens (:func:`maskable`), each in (0, 1]; k = max(1, round(f · n)).
        n_random: random rankings averaged into ``"random"`` (0: none), drawn from ``seed``.
        replace_id: the masking id, ``model.cfg.unk_id`` when ``None`` (why: the module's docstring).

    Raises:
        ValueError: the step does not fit the model, nothing may be masked, a fraction outside (0, 1], a method
            named ``"random"``, or scores of the wrong length.
    """
    step.check(model)
    positions = np.array(maskable(model, step))
    if not len(positions):
        raise ValueError("the step has no token that may be masked")
    if not fractions or not all(0 < f <= 1 for f in fractions):
        raise ValueError(f"fractions must lie in (0, 1], got {fractions}")
    if "random" in scores:
        raise ValueError("'random' names the random baseline; give the method another name")
    ids = step.src_ids if model.cfg.is_encoder_decoder else step.prefix_ids
    rankings: dict[str, list[np.ndarray]] = {}
    for method, raw in scores.items():
        values = _side(model, raw)
        if values.shape != (len(ids),):
            raise ValueError(f"{method}: {values.shape[0] if values.ndim else 0} scores for {len(ids)} tokens")
        rankings[method] = [positions[np.argsort(-values[positions], kind="stable")]]
    rng = np.random.default_rng(seed)
    if n_random:
        rankings["random"] = [rng.permutation(positions) for _ in range(n_random)]
    counts = tuple(min(len(positions), max(1, round(f * len(positions)))) for f in fractions)
    unk = model.cfg.unk_id if replace_id is None else replace_id
    variants = {ids: 0}
    # (method, fraction index, comprehensiveness variant, sufficiency variant)
    plan: list[tuple[str, int, int, int]] = []
    for method, orders in rankings.items():
        for order in orders:
            for f, k in enumerate(counts):
                comp, suff = _masked(ids, order[:k], unk), _masked(ids, order[k:], unk)
                plan.append(
                    (method, f, variants.setdefault(comp, len(variants)), variants.setdefault(suff, len(variants)))
                )
    probs = _probabilities(model, step, list(variants))
    sums = {name: {m: np.zeros(len(counts)) for m in rankings} for name in MEASURES}
    for method, f, comp_row, suff_row in plan:
        sums["comprehensiveness"][method][f] += probs[0] - probs[comp_row]
        sums["sufficiency"][method][f] += probs[0] - probs[suff_row]
    mean = {name: {m: tuple((v / len(rankings[m])).tolist()) for m, v in by.items()} for name, by in sums.items()}
    return Faithfulness(tuple(fractions), counts, float(probs[0]), mean["comprehensiveness"], mean["sufficiency"])
