"""More views of one head for the Attention page: BertViz-style lines, token bars, the difference of two maps.

Pure functions from weight arrays (tensors or numpy) and token labels to Plotly figures; no
Streamlit, no model. Conventions as in :mod:`viz.attention`: rows = queries, columns = keys, every attention
weight on the fixed 0–1 scale :data:`viz.theme.ATTENTION_SCALE`, labels are BPE pieces shown with
:func:`viz.token_labels.display_token`. The model grid is in :mod:`viz.grid`; one number per head (statistics,
ablation) in :mod:`viz.head_stats`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from viz import theme
from viz.attention import as_array, check_labels, key_plan
from viz.theme import ACCENT as HIGHLIGHT
from viz.theme import BLUE as LINE_COLOR
from viz.theme import (
    FONT,
    GRID,
    HALF_PX,
    MASKED_BG,
    MIN_READABLE,
    MONO,
    MUTED,
    PAGE_PX,
    SUBTLE,
    WHITE,
    wrap_title,
)
from viz.theme import INK as TEXT_COLOR
from viz.token_labels import (
    AXIS_TITLE_PX,
    display_token,
    labels_depth,
    plotly_escape,
    set_token_xaxes,
    shorten,
    token_xaxes_into,
    token_yaxis,
)


def lines_figure(
    weights,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    threshold: float = 0.05,
    query: int | None = None,
    title: str = "",
    max_lines: int = 1500,
) -> go.Figure:
    """One head as lines (BertViz's head view): queries in the left column, keys in the right, one line per pair.

    A line's opacity is the weight itself (``opacity = w``, 0–1, the same scale for every head); lines with
    ``w < threshold`` are omitted, and at most ``max_lines`` of the strongest are drawn. Each line trace
    carries ``meta = [query, key]`` and ``name = "query → key"``.

    Args:
        weights: ``[q_len, k_len]``, rows = queries.
        query: draw only this query's lines (its token is marked).

    Returns:
        A Plotly figure: the line traces first, then two text traces (queries, keys).
    """
    w = as_array(weights)
    if w.ndim != 2:
        raise ValueError(f"one head [q, k] is needed, got {w.shape}")
    q_len, k_len = w.shape
    check_labels(w.shape, q_labels, k_labels)
    q_disp = [display_token(t) for t in q_labels]
    k_disp = [display_token(t) for t in k_labels]
    rows = [query] if query is not None and 0 <= query < q_len else range(q_len)
    pairs = [
        (float(w[i, j]), i, j) for i in rows for j in range(k_len) if np.isfinite(w[i, j]) and w[i, j] >= threshold
    ]
    pairs.sort()  # weakest first, so that the strong lines are drawn on top
    pairs = pairs[-max_lines:] if max_lines else pairs
    data = [
        dict(
            type="scatter",
            x=[0, 1],
            y=[i, j],
            mode="lines",
            opacity=weight,
            line=dict(color=LINE_COLOR, width=2.5),
            hoverinfo="skip",
            showlegend=False,
            meta=[i, j],
            name=f"{q_disp[i]} → {k_disp[j]}",
        )
        for weight, i, j in pairs
    ]
    marked = query if query is not None and 0 <= query < q_len else None
    data.append(
        dict(
            type="scatter",
            x=[0] * q_len,
            y=list(range(q_len)),
            mode="text+markers",
            text=q_disp,
            textposition="middle left",
            textfont=dict(family=MONO, size=14, color=[HIGHLIGHT if i == marked else TEXT_COLOR for i in range(q_len)]),
            marker=dict(size=7, color=[HIGHLIGHT if i == marked else LINE_COLOR for i in range(q_len)]),
            hovertemplate="query %{text} (row %{y})<extra></extra>",
            showlegend=False,
            name="queries",
        )
    )
    data.append(
        dict(
            type="scatter",
            x=[1] * k_len,
            y=list(range(k_len)),
            mode="text+markers",
            text=k_disp,
            textposition="middle right",
            textfont=dict(family=MONO, size=14, color=TEXT_COLOR),
            marker=dict(size=7, color=LINE_COLOR),
            hovertemplate="key %{text} (column %{y})<extra></extra>",
            showlegend=False,
            name="keys",
        )
    )
    n = max(q_len, k_len)
    longest = max((len(t) for t in q_disp + k_disp), default=4)
    pad = min(1.5, 0.1 + 0.045 * longest)
    note = dict(showarrow=False, font=dict(size=14, color=SUBTLE), y=-0.9)
    layout = dict(
        title=theme.title(title),
        font=FONT,
        height=min(1400, 90 + 28 * n),
        margin=dict(l=10, r=10, t=60 if title else 30, b=10),
        plot_bgcolor=WHITE,
        xaxis=dict(visible=False, range=[-pad, 1 + pad]),
        yaxis=dict(visible=False, autorange="reversed"),
        annotations=[dict(note, x=0, text="queries", xanchor="right"), dict(note, x=1, text="keys", xanchor="left")],
    )
    return theme.figure(data, layout)


def token_bar_figure(
    weights,
    labels: Sequence[str],
    title: str = "",
    mark: int | None = None,
    axis_title: str = "keys",
    value_title: str = "weight",
    subtitle: str = "",
    width: int = HALF_PX,
) -> go.Figure:
    """Weights over tokens as bars, on a fixed 0–1 axis (one row or one column of an attention matrix).

    Args:
        weights: ``[n]``; NaN (a masked position) is drawn as 0.
        labels: ``n`` BPE pieces; mark: index of a bar drawn in the highlight colour (e.g. the query itself).
        title / subtitle: two title lines (e.g. the question, then which head answers it), each wrapped further
            where it would be cut off in a chart ``width`` px wide (default: a half-width column at 1280×720),
            for which every token label is laid out too (:func:`viz.theme.label_plan`).
    """
    w = np.nan_to_num(as_array(weights).reshape(-1))
    if len(w) != len(labels):
        raise ValueError("one weight per token is needed")
    disp = [display_token(t) for t in labels]
    colors = [HIGHLIGHT if i == mark else LINE_COLOR for i in range(len(w))]
    short = [shorten(t) for t in disp]
    plot_px = width - 20 - 60  # less the value axis: its title and numbers
    plan = theme.label_plan(short, plot_px)
    # A value over every bar where each has room for "0.00"; where they do not, Plotly shrank them to the bar's
    # width (unreadable): then only the largest is written, at full size, and hover has every value.
    roomy = plot_px / max(len(w), 1) >= 4 * 0.55 * FONT["size"] + 6
    top = int(np.argmax(w)) if len(w) else -1
    values = [f"{v:.2f}" if v >= 0.005 and (roomy or i == top) else "" for i, v in enumerate(w)]
    data = [
        dict(
            type="bar",
            x=list(range(len(w))),
            y=w,
            marker=dict(color=colors),
            customdata=disp,
            hovertemplate="%{customdata} (position %{x})<br>" + value_title + " %{y:.3f}<extra></extra>",
            text=values,
            textposition="outside",
            cliponaxis=False,
            constraintext="none" if not roomy else "both",
        )
    ]
    # each line wrapped for the chart's width (the subtitle is 14 px, so more of it fits), then escaped
    heads = [
        wrap_title(t, theme.title_chars(width, 16 if i == 0 else MIN_READABLE)).split("<br>")
        for i, t in enumerate(t for t in (title, subtitle) if t)
    ]
    lines = [[plotly_escape(part) for part in parts] for parts in heads]
    text = (
        "<br>".join(lines[0])
        + "".join(
            f"<br><span style='font-size:{MIN_READABLE}px;color:{MUTED}'>{part}</span>"
            for parts in lines[1:]
            for part in parts
        )
        if lines
        else ""
    )
    n_lines = sum(len(parts) for parts in lines)
    # the bars keep their 200 px however deep the labels under them are (a fixed height left them 130 px)
    under = labels_depth(short, plan) + 10 + AXIS_TITLE_PX + theme.TITLE_STANDOFF
    layout = dict(
        title=theme.title(text),
        font=FONT,
        height=int(200 + under + 26 + 28 * n_lines),
        margin=dict(l=10, r=10, t=26 + 28 * n_lines, b=10),
        plot_bgcolor=WHITE,
        bargap=0.2,
        yaxis=dict(
            range=[0, 1.1], title=dict(text=value_title, standoff=theme.TITLE_STANDOFF), gridcolor=GRID, automargin=True
        ),
    )
    token_xaxes_into(data, layout, short, plan, dict(family=MONO, color=TEXT_COLOR), axis_title)
    return theme.figure(data, layout)


#: Room (px) the difference map's colour bar takes at its right: its title ("second − first") is wider than "weight".
DIFF_COLORBAR_PX = 120


def difference_heatmap(
    a, b, q_labels: Sequence[str], k_labels: Sequence[str], title: str = "", width: int = PAGE_PX
) -> go.Figure:
    """Cell-by-cell difference ``b − a`` of two attention maps of the same shape ``[q_len, k_len]``.

    Red = the second attends more, blue = the first attends more; the scale is symmetric around 0 and
    masked (NaN) cells stay empty. Rows = queries, columns = keys; the tick labels are laid out for a chart
    ``width`` px wide, every one written (:func:`viz.theme.label_plan`).

    Raises:
        ValueError: the two maps differ in shape (there is no cell-by-cell difference then).
    """
    a_arr, b_arr = as_array(a), as_array(b)
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"shapes differ: {a_arr.shape} vs {b_arr.shape}")
    diff = b_arr - a_arr
    finite = diff[np.isfinite(diff)]
    bound = float(np.abs(finite).max()) if finite.size else 1.0
    q_disp = [shorten(display_token(t)) for t in q_labels]
    k_disp = [shorten(display_token(t)) for t in k_labels]
    top = 50 if title else 20
    # laid out as attention_heatmap lays out its axes, for the page's width at 1280×720: every label written
    plan = key_plan(q_disp, k_disp, width, DIFF_COLORBAR_PX)
    under = labels_depth(k_disp, plan) + 10 + AXIS_TITLE_PX + theme.TITLE_STANDOFF
    height = int(top + max(30, theme.LINE_EM * plan.size + 2) * diff.shape[0] + under + 10)
    fig = go.Figure(
        go.Heatmap(
            z=diff,
            x=list(range(diff.shape[1])),
            y=list(range(diff.shape[0])),
            colorscale="RdBu",
            reversescale=True,
            zmid=0.0,
            zmin=-(bound or 1.0),
            zmax=bound or 1.0,
            xgap=1,
            ygap=1,
            hovertemplate="row %{y}, column %{x}<br>difference %{z:+.3f}<extra></extra>",
            colorbar=dict(title=dict(text="second − first"), thickness=14),
        )
    )
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left"),
        font=FONT,
        plot_bgcolor=MASKED_BG,
        height=height,
        margin=dict(l=10, r=10, t=top, b=10),
    )
    # no zero lines: they would show through the empty masked cells of the first row
    set_token_xaxes(fig, k_disp, plan, dict(family=MONO, color=TEXT_COLOR), "keys (attended to) →")
    fig.update_yaxes(**token_yaxis(q_disp, plan.size, "queries (attending) ↓"), autorange="reversed")
    return fig
