"""A run's ``metrics.jsonl`` records read as the points of a curve: one metric against the step, the tokens seen or
the training time. No figures here (:mod:`charts.training` draws them), no Streamlit.

The trainer (``python -m trainer.train``) appends one JSON object per line to ``runs/<id>/metrics.jsonl``:

* a **log line** every ``--log-every`` steps: ``step, epoch, loss, lr, grad_norm, tokens_per_s, tokens_seen,
  time_s`` (``loss`` is the label-smoothed training cross-entropy averaged since the previous log line);
* an **evaluation line**: ``step, valid_loss, valid_ppl, valid_bleu, valid_chrf, time_s`` (no ``tokens_seen``: it
  is read off the log lines, interpolated by step); a decoder-only run (a language model) has no ``valid_bleu`` /
  ``valid_chrf``;
* ``test_bleu`` / ``event`` lines, which no chart uses.

A run being written may end in half a line, and files may hold garbage: every record that is not a dict, or
lacks a numeric step, x value or metric value (or holds NaN / infinity), is skipped, never raised on. A resumed
run may log a step twice: the last record of a step wins.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: x-axis choices: label shown in the app (and kept in the URL) → axis title.
X_AXES: dict[str, str] = {
    "step": "optimizer step",
    "tokens seen": "tokens seen (source + target)",
    "wall time (minutes)": "training time (minutes, pauses not counted)",
}


def finite_number(value) -> float | None:
    """``value`` as a finite float, or ``None`` (bools, strings, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _step(rec) -> int | None:
    if not isinstance(rec, dict):
        return None
    step = rec.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    return step


def by_step(records: Sequence[dict], key: str) -> dict[int, float]:
    """``{step: value of key}`` over the records holding a usable ``key``; the last record of a step wins."""
    out: dict[int, float] = {}
    for rec in records or ():
        step = _step(rec)
        value = finite_number(rec.get(key)) if step is not None else None
        if step is not None and value is not None:
            out[step] = value
    return out


def run_series(records: Sequence[dict], metric: str, x: str = "step") -> tuple[list[float], list[float]]:
    """The points ``(xs, ys)`` of one run's ``metric`` against the x axis ``x`` (a key of :data:`X_AXES`),
    sorted by step; the last record of a step wins. Records without a step, the metric or the x value are
    skipped.

    ``tokens seen`` of a record that does not hold it (an evaluation line) is interpolated by step between the
    log lines around it (step 0 = 0 tokens; past the last log line, the last count); ``wall time (minutes)``
    is the record's ``time_s`` / 60.
    """
    if x not in X_AXES:
        raise ValueError(f"unknown x axis {x!r} (one of {', '.join(X_AXES)})")
    points: dict[int, tuple[float, float]] = {}
    unplaced: dict[int, float] = {}  # step → y of a record without its token count
    for rec in records or ():
        step = _step(rec)
        y = finite_number(rec.get(metric)) if step is not None else None
        if step is None or y is None:
            continue
        xv: float | None
        if x == "step":
            xv = float(step)
        elif x == "wall time (minutes)":
            t = finite_number(rec.get("time_s"))
            if t is None:
                continue
            xv = t / 60.0
        else:
            xv = finite_number(rec.get("tokens_seen"))  # None: interpolated below
        # the last record of a step wins, placed or not
        points.pop(step, None)
        unplaced.pop(step, None)
        if xv is None:
            unplaced[step] = y
        else:
            points[step] = (xv, y)
    seen = by_step(records, "tokens_seen") if unplaced else {}
    if seen:  # without a log line with a token count, nothing unplaced can be placed
        seen.setdefault(0, 0.0)
        known = sorted(seen)
        filled = np.interp([float(s) for s in unplaced], known, [seen[k] for k in known])
        points.update({s: (float(t), y) for (s, y), t in zip(unplaced.items(), filled, strict=True)})
    steps = sorted(points)
    return [points[s][0] for s in steps], [points[s][1] for s in steps]
