"""Inside one head, for one query: the score figure of the Attention page's "Query · key" tab (what each dimension
adds to each key's score, the scores, the weights), and which dimensions matter. The vectors behind the score and the
values the head reads are drawn by :mod:`viz.qk_vectors`; the look they share is :mod:`viz.qk_panels`.

Pure functions from arrays (numpy, or anything :func:`numpy.asarray` reads) and token labels to Plotly figures; no
Streamlit, no torch, no model. Every key is one row, in the order of the sentence, and every figure labels all of
them. Values that can be either sign (vector entries, each dimension's part of a score) are on one red–white–blue
scale centred at 0 (red = positive: a dimension that raises the score); weights are blue bars on 0–1.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from viz.qk_panels import (
    BAR_PX,
    DIVERGING,
    UNDER_PX,
    axis_title,
    base_layout,
    checked,
    dimension_axis,
    dimensions_px,
    key_row_px,
    panel_domains,
    panel_title,
    shown_keys,
    signed_bound,
    signed_colours,
)
from viz.theme import (
    BLUE,
    GRID,
    INK,
    MASKED_BG,
    MIN_READABLE,
    NARROW_PX,
    PAGE_PX,
    SUBTLE,
    ZERO_LINE,
    figure,
)
from viz.token_labels import token_yaxis

#: Bar colours of a negative and a positive score, from near the ends of :data:`viz.qk_panels.DIVERGING`.
NEGATIVE, POSITIVE = sample_colorscale(DIVERGING["colorscale"], [0.1, 0.9])


def dimension_order(contributions, mask=None, sort: bool = True) -> np.ndarray:
    """The order the ``d_k`` dimensions are drawn in: as in the head (``sort=False``), or by their mean
    ``|contribution|`` over the keys the query may see, largest first (``contributions``: ``[keys, d_k]``,
    ``mask``: bool ``[keys]``, ``True`` = seen; ties keep the head's order). Returns ``[d_k]`` dimension indices."""
    c = checked(contributions, 2, "contributions")
    if not sort:
        return np.arange(c.shape[1])
    seen = np.ones(c.shape[0], bool) if mask is None else np.asarray(mask, bool)
    size = np.abs(c[seen]).mean(0) if seen.any() else np.zeros(c.shape[1])
    return np.argsort(-size, kind="stable")


def _runs(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted ``indices`` as runs of neighbours: ``[1, 2, 3, 7]`` → ``[(1, 3), (7, 7)]``."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def score_figure(
    contributions,
    scores,
    weights,
    key_labels: Sequence[str],
    *,
    mask=None,
    bias=None,
    unrotated=None,
    order=None,
    own: int | None = None,
    title: str = "",
    width: int = PAGE_PX,
) -> go.Figure:
    """One query's scores, a row per key: what each dimension adds (heatmap), the score (bars), the weight (bars).

    Args:
        contributions: ``[keys, d_k]`` ``q_d·k_{j,d} / √d_k``; each row sums to the key's score.
        scores: ``[keys]`` ``q·k_j / √d_k``; weights: ``[keys]`` the softmax (0–1).
        key_labels: one piece per key (every one is written); own: the key at the query's own position (bold).
        mask: bool ``[keys]``, ``True`` = may attend (default all): a masked key's row is grey and blank, its score
            reads "masked (−∞)" and its weight is 0.
        bias: ``[keys]`` ALiBi's bias: the logit ``score + bias`` is drawn as a diamond on the score's row.
        unrotated: ``[keys]`` the score without RoPE's rotation, drawn as a ring on the score's row.
        order: the dimensions' drawing order (:func:`dimension_order`; default as in the head).
        title: the figure's title; width: its width (px) at 1280×720.

    Returns:
        A figure of three panels sharing the key axis: a heatmap (its colour bar under it), the score bars (then
        the bias and unrotated markers, and the masked keys' note) and the weight bars.

    Raises:
        ValueError: the shapes do not agree.
    """
    c = checked(contributions, 2, "contributions")
    n, d_k = c.shape
    s, w = checked(scores, 1, "scores"), checked(weights, 1, "weights")
    seen = np.ones(n, bool) if mask is None else np.asarray(mask, bool).reshape(-1)
    order = np.arange(d_k) if order is None else np.asarray(order, int)
    if len(s) != n or len(w) != n or len(seen) != n or len(key_labels) != n or sorted(order) != list(range(d_k)):
        raise ValueError(f"scores, weights, mask and labels need one entry per key ({n}), order every dimension")
    rows = list(range(n))
    labels = shown_keys(key_labels, own)
    z = np.where(seen[:, None], c[:, order], np.nan)
    hover = [[f"key <b>{labels[j]}</b> · dimension {int(order[i])}" for i in range(d_k)] for j in rows]
    shown_s = np.where(seen, s, 0.0)
    data = [
        dict(
            type="heatmap",
            z=z,
            x=list(range(d_k)),
            y=rows,
            **signed_colours(signed_bound(z), "q_d·k_d/√d_k", side="top"),
            customdata=hover,
            xgap=0.5,
            ygap=1,
            hovertemplate="%{customdata}<br>q_d·k_d/√d_k %{z:+.4f}<extra></extra>",
        ),
        dict(
            type="bar",
            x=shown_s,
            y=rows,
            xaxis="x2",
            yaxis="y2",
            orientation="h",
            marker=dict(color=[POSITIVE if v >= 0 else NEGATIVE for v in shown_s]),
            text=[f"{v:+.2f}" if m else "" for v, m in zip(s, seen, strict=True)],
            textposition="outside",
            cliponaxis=False,
            customdata=labels,
            hovertemplate="%{customdata}: score %{x:+.4f}<extra></extra>",
            showlegend=False,
            name="score",
        ),
    ]
    extremes = [shown_s]
    if bias is not None:
        b = checked(bias, 1, "bias")
        logit = np.where(seen, s + b, np.nan)
        extremes.append(logit)
        data.append(
            dict(
                type="scatter",
                x=logit,
                y=rows,
                xaxis="x2",
                yaxis="y2",
                mode="markers",
                marker=dict(symbol="diamond", size=11, color=INK),
                name="+ ALiBi bias = logit",
                customdata=np.stack([b, np.nan_to_num(logit)], -1),
                hovertemplate="bias %{customdata[0]:+.4f}<br>logit %{customdata[1]:+.4f}<extra></extra>",
            )
        )
    if unrotated is not None:
        u = np.where(seen, checked(unrotated, 1, "unrotated"), np.nan)
        extremes.append(u)
        data.append(
            dict(
                type="scatter",
                x=u,
                y=rows,
                xaxis="x2",
                yaxis="y2",
                mode="markers",
                name="without RoPE's rotation",
                hovertemplate="without rotation %{x:+.4f}<extra></extra>",
                marker=dict(symbol="circle-open", size=11, color=SUBTLE, line=dict(width=2)),
            )
        )
    lo = min([0.0] + [float(np.nanmin(e)) for e in extremes if np.isfinite(e).any()])
    hi = max([0.0] + [float(np.nanmax(e)) for e in extremes if np.isfinite(e).any()])
    pad = (0.8 if width < NARROW_PX else 0.45) * (hi - lo or 1.0)  # room for the numbers beside the bars
    left = lo - (pad if lo < 0 else 0.05 * pad)
    masked = [j for j in rows if not seen[j]]
    if masked:  # written from the panel's left edge: from 0 it ran out of the panel
        data.append(
            dict(
                type="scatter",
                x=[left] * len(masked),
                y=masked,
                xaxis="x2",
                yaxis="y2",
                mode="text",
                text=["masked (−∞)"] * len(masked),
                textposition="middle right",
                cliponaxis=False,
                textfont=dict(size=MIN_READABLE, color=SUBTLE),
                hoverinfo="skip",
                showlegend=False,
                name="masked",
            )
        )
    data.append(
        dict(
            type="bar",
            x=w,
            y=rows,
            xaxis="x3",
            yaxis="y3",
            orientation="h",
            marker=dict(color=BLUE),
            text=[f"{v:.2f}" if v >= 0.005 else "" for v in w],
            textposition="outside",
            cliponaxis=False,
            customdata=labels,
            showlegend=False,
            name="weight",
            hovertemplate="%{customdata}: weight %{x:.4f}<extra></extra>",
        )
    )
    row = key_row_px(n)
    plot_h = row * n
    # A phone's width (under NARROW_PX) gives the bars more of it and the panels shorter titles: laid out as on a
    # projector, the bars' numbers, ticks and titles were written over each other
    narrow = width < NARROW_PX
    shares = (0.36, 0.36, 0.28) if narrow else (0.6, 0.22, 0.18)
    domains = panel_domains(shares, 0.09 if narrow else 0.035)
    layout = base_layout(title, width, plot_h, UNDER_PX + BAR_PX)
    key_axis = dict(autorange="reversed", showgrid=False, zeroline=False)
    plot_px = dimensions_px(width, key_labels) * shares[0]
    sorted_note = " (sorted by mean |part|)" if list(order) != list(range(d_k)) else ""
    layout.update(
        bargap=0.25,
        xaxis=dict(
            dimension_axis(order, plot_px), domain=domains[0], anchor="y", title=axis_title("dimension d" + sorted_note)
        ),
        xaxis2=dict(
            domain=domains[1],
            anchor="y2",
            range=[left, hi + pad],
            gridcolor=GRID,
            zeroline=True,
            zerolinecolor=ZERO_LINE,
            **(dict(nticks=3) if narrow else {}),
        ),
        xaxis3=dict(
            domain=domains[2],
            anchor="y3",
            range=[0, 1.7 if narrow else 1.3],
            tickvals=[0, 1] if narrow else [0, 0.5, 1],
            gridcolor=GRID,
        ),
        yaxis=dict(token_yaxis(labels, MIN_READABLE, "keys"), **key_axis, anchor="x"),
        yaxis2=dict(key_axis, anchor="x2", matches="y", showticklabels=False),
        yaxis3=dict(key_axis, anchor="x3", matches="y", showticklabels=False),
        annotations=[
            panel_title(t, d)
            for t, d in zip(
                ("part per dimension", "score", "weight")
                if narrow
                else ("each dimension's part of the score", "score q·k/√d_k", "weight"),
                domains,
                strict=True,
            )
        ],
        legend=dict(
            orientation="h",
            x=domains[1][0],
            xanchor="left",
            y=-UNDER_PX / plot_h,
            yanchor="top",
            font=dict(size=MIN_READABLE),
        ),
        # the masked keys' rows greyed across every panel (the mask, not a value of 0), one band per run of them
        shapes=[
            dict(
                type="rect",
                xref=f"x{col if col > 1 else ''} domain",
                yref="y",
                x0=0,
                x1=1,
                y0=start - 0.5,
                y1=end + 0.5,
                fillcolor=MASKED_BG,
                line=dict(width=0),
                layer="below",
            )
            for start, end in _runs(masked)
            for col in (1, 2, 3)
        ],
    )
    data[0]["colorbar"].update(
        orientation="h",
        x=sum(domains[0]) / 2,
        xanchor="center",
        len=domains[0][1] - domains[0][0],
        y=-UNDER_PX / plot_h,
        yanchor="top",
    )
    return figure(data, layout)


def top_dimensions(contributions_row, k: int = 3) -> list[tuple[int, float]]:
    """The ``k`` dimensions whose part of one key's score (``[d_k]``) is largest in size: ``[(d, part), …]``."""
    row = checked(contributions_row, 1, "contributions_row")
    best = np.argsort(-np.abs(row), kind="stable")[:k]
    return [(int(d), float(row[d])) for d in best if math.isfinite(row[d])]
