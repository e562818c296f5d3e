"""Attention beside attribution for one decoding step, drawn from arrays and pieces (no model, no Streamlit).

* :func:`attribution_html`: methods × tokens, the source's pieces and the target prefix's side by side, every cell
  a share on one 0–1 scale, every piece labelled;
* :func:`head_change_html`: layers × heads, how much each head's output moved when an input word was changed;
* :func:`share_line_svg`: the source's share of the prediction at every step so far, as a line.

HTML and SVG rather than Plotly charts: the Translate page redraws them on a click and loads no Plotly. The numbers
come from ``reading/`` through ``reading_views/attribution.py``; here they are plain arrays. The two HTML grids are
laid out by :mod:`charts.shaded_grid`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from charts.shaded_grid import GAP_PX, GRID_PX, ROW_HEAD_EM, WHITE_TEXT_FROM, grid_sizes, scale_legend, shaded_grid
from viz.attention import scale_colours
from viz.theme import (
    ACCENT,
    BLUE,
    BORDER,
    INK,
    LINE_EM,
    MIN_READABLE,
    MONO,
    MONO_CHAR_EM,
    SANS,
    SUBTLE,
    WHITE,
    escape_html,
)
from viz.token_labels import display_token

#: The narrowest cell (px) that is marked "−" where a score lowered p(token).
MARK_PX = 12


def _attribution_cells(method_labels, source_labels, source_shares, prefix_labels, prefix_shares, negative):
    """``(labels, groups, group names, shades [M, S + T], negative [M, S + T], outlined column per row)`` of
    :func:`attribution_html` and :func:`attribution_svg`; raises ``ValueError`` for shares that do not fit."""
    src = np.asarray(source_shares, dtype=float).reshape(len(method_labels), -1)
    pre = np.asarray(prefix_shares, dtype=float).reshape(len(method_labels), -1)
    if src.shape[1] != len(source_labels) or pre.shape[1] != len(prefix_labels):
        raise ValueError(
            f"{src.shape[1]} source and {pre.shape[1]} prefix shares for {len(source_labels)} and "
            f"{len(prefix_labels)} labels"
        )
    shades = np.nan_to_num(np.concatenate([src, pre], axis=1))
    labels = [display_token(t) for t in list(source_labels) + list(prefix_labels)]
    n_src = len(source_labels)
    groups = [0] * n_src + [1 if n_src else 0] * len(prefix_labels)
    names = ["source", "prefix"] if n_src else ["prefix"]  # short: three prefix columns are narrow
    neg = np.zeros(shades.shape, bool) if negative is None else np.asarray(negative, bool).reshape(shades.shape)
    # the strongest piece of each row on the side that is the evidence: the source, or a decoder-only prefix
    side = shades[:, :n_src] if n_src else shades
    outlined = [int(np.argmax(r)) if r.size and r.max() > 0 else None for r in side]
    return labels, groups, names, shades, neg, outlined


def attribution_html(
    method_labels: Sequence[str],
    source_labels: Sequence[str],
    source_shares,
    prefix_labels: Sequence[str],
    prefix_shares,
    negative=None,
    current: int | None = None,
    title: str = "",
    large: bool = False,
    width: float = GRID_PX,
) -> str:
    """Every method's share of each token, methods as rows, the source's pieces then the prefix's as columns.

    Args:
        method_labels: one label per method (the rows).
        source_labels / prefix_labels: the pieces as the page shows them (``source_labels`` empty for a
            decoder-only model: the grid then has the prefix alone).
        source_shares / prefix_shares: ``[methods, S]`` / ``[methods, T]`` shares in 0–1 (each row of a side sums
            to 1: ``TokenScores.source_shares``), drawn on one colour scale.
        negative: ``[methods, S + T]`` booleans, or ``None``: cells whose signed score lowered the chosen token's
            probability, marked "−" where a cell is at least :data:`MARK_PX` wide (always said in the hover).
        current: the row marked as the method picked (``None``: none).
        title: a heading ('' for none); large: presentation mode (16 px labels instead of 14).
        width: the grid's width (px) in the narrowest layout it is shown in.

    Returns:
        An HTML fragment (every piece escaped): each cell carries its share in ``data-v`` and a hover text; in each
        row the token with the largest share is outlined; each column label carries its tier in ``data-tier``.

    Raises:
        ValueError: shares whose shape does not fit the labels.
    """
    labels, groups, names, shades, neg, outlined = _attribution_cells(
        method_labels, source_labels, source_shares, prefix_labels, prefix_shares, negative
    )
    hovers = [
        [f"{m}: {labels[j]} {shades[i, j]:.3f}{' (lowered p)' if neg[i, j] else ''}" for j in range(len(labels))]
        for i, m in enumerate(method_labels)
    ]
    # a "−" needs a cell about as wide as itself: in a long sentence's narrow cells the sign stays in the hover
    cell_px = (width - ROW_HEAD_EM * grid_sizes(large)[0] - GAP_PX) / max(len(labels), 1)
    signed = cell_px >= MARK_PX
    marks = [["−" if neg[i, j] and signed else "" for j in range(len(labels))] for i in range(len(method_labels))]
    legend = (
        scale_legend("share 0", "1")
        + "<span>each side's row sums to 1 · outlined: the largest"
        + (" source piece" if len(source_labels) else "")
        + (" · −: lowered p(token)" if signed else " · hover: a piece that lowered p(token) says so")
        + "</span>"
    )
    return shaded_grid(
        list(method_labels),
        labels,
        groups,
        names,
        shades,
        hovers,
        marks,
        outlined,
        current,
        title,
        legend,
        large,
        width,
        "attr",
    )


#: Sizes of :func:`attribution_svg`, px: a row, the narrowest column, the labels.
SVG_ROW, SVG_COL, SVG_PX = 30, 26, 15


def attribution_svg(
    method_labels: Sequence[str],
    source_labels: Sequence[str],
    source_shares,
    prefix_labels: Sequence[str],
    prefix_shares,
    negative=None,
    title: str = "",
) -> str:
    """What :func:`attribution_html` shows (arguments as there) as a standalone SVG document to save: a row per
    method, a column per piece labelled upright above it, the shares on the same colour scale, each row's largest
    outlined and "−" where a score lowered p(token). Sizes in px (:data:`SVG_ROW` …); the width follows the number of
    pieces. Raises ``ValueError`` for shares that do not fit the labels."""
    labels, groups, names, shades, neg, outlined = _attribution_cells(
        method_labels, source_labels, source_shares, prefix_labels, prefix_shares, negative
    )
    esc = escape_html
    head_w = max((len(m) for m in method_labels), default=4) * 0.55 * SVG_PX + 16
    label_h = max((len(t) for t in labels), default=1) * MONO_CHAR_EM * SVG_PX + 10
    top = (36 if title else 8) + SVG_PX + 6 + label_h
    xs, x = [], head_w
    for j, group in enumerate(groups):
        x += GAP_PX if j and group != groups[j - 1] else 0
        xs.append(x)
        x += SVG_COL
    width, height = x + 8, top + SVG_ROW * len(method_labels) + 40
    colours = np.array(scale_colours(shades), dtype=object).reshape(shades.shape)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{esc(SANS)}" font-size="{SVG_PX}">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="{WHITE}"/>',
    ]
    if title:
        parts.append(f'<text x="4" y="24" font-size="18" font-weight="600" fill="{INK}">{esc(title)}</text>')
    for g, name in enumerate(names):
        cols = [xs[j] for j in range(len(labels)) if groups[j] == g]
        if cols:
            parts.append(
                f'<text x="{(cols[0] + cols[-1] + SVG_COL) / 2:.1f}" y="{top - label_h - 6:.0f}" '
                f'text-anchor="middle" fill="{SUBTLE}" font-weight="600">{esc(name)}</text>'
            )
    for j, label in enumerate(labels):
        parts.append(
            f'<text transform="translate({xs[j] + SVG_COL / 2 + SVG_PX * 0.35:.1f},{top - 6:.0f}) '
            f'rotate(-90)" font-family="{esc(MONO)}" fill="{INK}" xml:space="preserve">{esc(label)}</text>'
        )
    for i, method in enumerate(method_labels):
        y = top + i * SVG_ROW
        parts.append(
            f'<text x="{head_w - 8:.0f}" y="{y + SVG_ROW / 2 + 5:.0f}" text-anchor="end" fill="{INK}">'
            f"{esc(method)}</text>"
        )
        for j in range(len(labels)):
            ring = f' stroke="{ACCENT}" stroke-width="3"' if outlined[i] == j else ""
            parts.append(
                f'<rect x="{xs[j] + 1:.0f}" y="{y + 1}" width="{SVG_COL - 2}" height="{SVG_ROW - 2}" '
                f'rx="2" fill="{colours[i, j]}"{ring} data-v="{shades[i, j]:.4f}"/>'
            )
            if neg[i, j]:
                ink = WHITE if shades[i, j] >= WHITE_TEXT_FROM else INK
                parts.append(
                    f'<text x="{xs[j] + SVG_COL / 2:.1f}" y="{y + SVG_ROW / 2 + 5:.0f}" '
                    f'text-anchor="middle" fill="{ink}">−</text>'
                )
    foot = top + SVG_ROW * len(method_labels) + 26
    parts.append(
        f'<text x="4" y="{foot}" fill="{SUBTLE}">Share of each side (row sums to 1), white 0 → dark blue 1; '
        "outlined: the largest; −: lowered p(token).</text>"
    )
    return "".join(parts) + "</svg>"


def head_change_html(
    change, title: str = "", unit: str = "‖Δ output‖", large: bool = False, width: float = GRID_PX
) -> str:
    """Layers × heads: how far each head's output moved, shaded relative to the largest (which is outlined).

    Args:
        change: ``[layers, heads]`` non-negative sizes (residual-stream units).
        title: a heading; unit: what a value is, for the hover and the legend.

    Returns:
        An HTML fragment; each cell carries its value over the largest in ``data-v`` and the value in its hover.

    Raises:
        ValueError: ``change`` is not two-dimensional.
    """
    z = np.nan_to_num(np.asarray(change, dtype=float))
    if z.ndim != 2:
        raise ValueError(f"change must be [layers, heads], got shape {z.shape}")
    peak = float(z.max()) if z.size else 0.0
    shades = z / peak if peak > 0 else np.zeros_like(z)
    rows = [f"layer {i + 1}" for i in range(z.shape[0])]
    heads = [str(h + 1) for h in range(z.shape[1])]
    hovers = [
        [f"layer {i + 1}, head {h + 1}: {unit} = {z[i, h]:.3f}" for h in range(z.shape[1])] for i in range(z.shape[0])
    ]
    marks = [[""] * z.shape[1] for _ in rows]
    top = np.unravel_index(int(np.argmax(z)), z.shape) if peak > 0 else (-1, -1)
    outlined = [int(top[1]) if i == top[0] else None for i in range(z.shape[0])]
    legend = (
        scale_legend("0", f"{peak:.3g}") + f"<span>{escape_html(unit)} · columns: heads · outlined: the largest</span>"
    )
    return shaded_grid(
        rows,
        heads,
        [0] * len(heads),
        ["head"],
        shades,
        hovers,
        marks,
        outlined,
        None,
        title,
        legend,
        large,
        width,
        "heads",
    )


def share_line_svg(
    step_labels: Sequence[str], shares, title: str = "", width: float = GRID_PX, large: bool = False
) -> str:
    """The source's share of each step's prediction (0–1) as a line over the steps, each step labelled upright
    with its token under the axis.

    Args:
        step_labels: one label per step (``"3 ▁lebt"``); shares: ``[steps]`` in 0–1.
        title: a heading; width: the drawing's width (px); large: presentation mode (16 px instead of 14).

    Returns:
        An HTML fragment: an ``<svg>`` (text escaped) in a ``div`` that scrolls sideways when the steps need more
        than ``width``; each point is a ``circle`` carrying ``data-share``.

    Raises:
        ValueError: not one share per label.
    """
    y = np.clip(np.nan_to_num(np.asarray(shares, dtype=float).reshape(-1)), 0.0, 1.0)
    if len(y) != len(step_labels):
        raise ValueError(f"{len(y)} shares for {len(step_labels)} steps")
    px = MIN_READABLE + 2 if large else MIN_READABLE
    shown = [display_token(s) for s in step_labels]
    left, right, top = 3 * px, 12, (2 * px + 8 if title else 12)
    plot_h = 140
    # every step labelled: a long decoding gets a wider drawing that scrolls sideways, never a label left out
    width = max(float(width), left + right + len(y) * LINE_EM * px)
    step_px = (width - left - right) / max(len(y), 1)
    label_h = max((len(s) for s in shown), default=1) * MONO_CHAR_EM * px + 10
    height = top + plot_h + label_h
    xs = [left + step_px * (i + 0.5) for i in range(len(y))]
    ys = [top + plot_h * (1 - v) for v in y]
    esc = escape_html
    parts = [
        f'<div class="ae-share-line" style="overflow-x:auto"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'font-family="{esc(SANS)}" font-size="{px}">'
    ]
    if title:
        parts.append(f'<text x="0" y="{px + 2}" font-weight="600" fill="{INK}">{esc(title)}</text>')
    for v in (0.0, 0.5, 1.0):
        gy = top + plot_h * (1 - v)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{gy:.1f}" y2="{gy:.1f}" stroke="{BORDER}"/>'
            f'<text x="{left - 6}" y="{gy + px * 0.35:.1f}" text-anchor="end" fill="{SUBTLE}">{v:g}</text>'
        )
    if len(y) > 1:
        points = " ".join(f"{x:.1f},{v:.1f}" for x, v in zip(xs, ys, strict=True))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{BLUE}" stroke-width="2.5"/>')
    for x, v, share, label in zip(xs, ys, y, shown, strict=True):
        parts.append(
            f'<circle cx="{x:.1f}" cy="{v:.1f}" r="4.5" fill="{BLUE}" data-share="{share:.4f}">'
            f"<title>{esc(label)}: {share:.3f}</title></circle>"
            f'<text transform="translate({x + px * 0.35:.1f},{top + plot_h + 6}) rotate(-90)" '
            f'text-anchor="end" font-family="{esc(MONO)}" fill="{INK}" xml:space="preserve">'
            f"{esc(label)}</text>"
        )
    return "".join(parts) + "</svg></div>"
