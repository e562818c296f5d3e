"""A step's attribution as the view's arrays: every method's share of each source and prefix piece on one scale,
and the compressed ``.npz`` of every score a visitor downloads."""

from __future__ import annotations

import io

import numpy as np

from model.checkpoint import Checkpoint
from reading.attribution import METHODS, StepAttribution
from reading.faithfulness import Faithfulness
from ui import pieces


def share_matrices(reading: StepAttribution, layer: int | None, head: int | None):
    """``(source shares [methods, S], prefix shares [methods, T], negative [methods, S + T])`` in :data:`METHODS`
    order: each side's |score| over its total, and where a signed score lowered p(token)."""
    scores = [reading.scores(m, layer, head) for m in METHODS]
    src = np.array([s.source_shares for s in scores]).reshape(len(METHODS), -1)
    pre = np.array([s.prefix_shares for s in scores])
    negative = np.array([np.concatenate([s.source, s.prefix]) < 0 for s in scores])
    return src, pre, negative


def attribution_npz(
    ckpt: Checkpoint, reading: StepAttribution, faith: Faithfulness | None, layer: int | None, head: int | None
) -> bytes:
    """The step's scores as a compressed ``.npz`` (``np.load`` reads it without pickle): ``methods`` ``[M]``,
    ``source_scores`` ``[M, S]`` and ``prefix_scores`` ``[M, T]`` (signed; gradient methods in nats),
    ``source_shares`` / ``prefix_shares`` (the page's shares), ``source_tokens`` / ``prefix_tokens`` /
    ``token``, ``attention_source`` / ``attention_prefix`` ``[layers, heads, S or T]`` (every layer and head),
    ``log_prob``, ``baseline_log_prob``, ``completeness_gap``, ``n_steps``, ``baseline``, ``source_share``,
    ``layer`` / ``head`` (0-based, −1 = mean) and, when measured, ``faithfulness_methods``, ``comprehensiveness``
    and ``sufficiency`` ``[M + 1, fractions]`` (the last row random) with ``fractions``."""
    tok, step = ckpt.tokenizer, reading.step
    scores = [reading.scores(m, layer, head) for m in METHODS]
    src, pre, _ = share_matrices(reading, layer, head)
    grads = reading.gradients
    arrays = {
        "methods": np.array(METHODS),
        "token": np.array(pieces.of_id(tok, step.token_id)),
        "source_scores": np.array([s.source for s in scores]).reshape(len(METHODS), -1),
        "prefix_scores": np.array([s.prefix for s in scores]),
        "source_shares": src,
        "prefix_shares": pre,
        "source_tokens": np.array(pieces.of_ids(tok, step.src_ids), dtype=str),
        "prefix_tokens": np.array(pieces.of_ids(tok, step.prefix_ids), dtype=str),
        "attention_source": reading.attention.source_weights,
        "attention_prefix": reading.attention.prefix_weights,
        "log_prob": np.array(grads.log_prob),
        "baseline_log_prob": np.array(grads.baseline_log_prob),
        "completeness_gap": np.array(grads.completeness_gap),
        "n_steps": np.array(grads.n_steps),
        "baseline": np.array(grads.baseline),
        "source_share": np.array(reading.source_share),
        "layer": np.array(-1 if layer is None else layer),
        "head": np.array(-1 if head is None else head),
    }
    if faith is not None:
        names = list(METHODS) + ["random"]
        arrays.update(
            faithfulness_methods=np.array(names),
            fractions=np.array(faith.fractions),
            comprehensiveness=np.array([faith.comprehensiveness[m] for m in names]),
            sufficiency=np.array([faith.sufficiency[m] for m in names]),
        )
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()
