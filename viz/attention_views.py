"""More views of attention for the Attention page: the model grid, BertViz-style lines, token bars, head statistics.

Pure functions from weight arrays (tensors or numpy) and token labels to Plotly or Altair figures; no
Streamlit, no model. Conventions as in :mod:`viz.attention`: rows = queries, columns = keys, every attention
weight on the fixed 0–1 scale :data:`~viz.attention.ATTENTION_SCALE`, labels are BPE pieces shown with
:func:`~viz.attention.display_token`.
"""

from __future__ import annotations

from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.attention import _as_array, _short, causal_blank, display_token, plotly_escape
from viz.theme import (ACCENT as HIGHLIGHT, ATTENTION_SCALE, BLUE as LINE_COLOR, FONT, GRID, INK as TEXT_COLOR,
                       MASKED_BG, MONO, PALE_BLUE, PLOTLY_CONFIG, SUBTLE, WHITE, ZERO_LINE)
#: Above this many tokens on a side, the grid's small panels carry no tick labels (hover still names the pair).
GRID_LABEL_LIMIT = 24
#: Above this many cells in all, the grid's hover shows positions only (per-cell label strings get heavy).
GRID_HOVER_CELLS = 60_000
#: Cells (layers × heads × queries × keys) up to which the clickable Altair grid is offered.
ALTAIR_GRID_CELLS = 40_000


def _check_labels(shape: tuple[int, ...], q_labels: Sequence[str], k_labels: Sequence[str]) -> None:
    if len(q_labels) != shape[-2] or len(k_labels) != shape[-1]:
        raise ValueError(f"labels ({len(q_labels)}, {len(k_labels)}) do not fit weights {shape}")


def model_grid_figure(
    attn,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    causal: bool = False,
    title: str = "",
    row_names: Sequence[str] | None = None,
    col_names: Sequence[str] | None = None,
    highlight: tuple[int, int] | None = None,
) -> go.Figure:
    """Every head of every layer as one small heatmap: a grid of ``layers`` rows × ``heads`` columns.

    Args:
        attn: ``[layers, heads, q_len, k_len]`` weights (tensor or array), rows = queries. Any ``[R, C, q, k]``
            stack works (the Summaries tab passes ``[layers, 2, q, k]`` for mean / max over heads).
        q_labels / k_labels: BPE pieces of the rows / columns (tick labels on the outer axes only, and none
            when a side has more than :data:`GRID_LABEL_LIMIT` pieces).
        causal: blank the masked upper triangle.
        row_names / col_names: panel titles are ``"{row} · {col}"`` (default ``layer i`` / ``head j``).
        highlight: ``(row, col)`` of a panel to outline (the head currently open).

    Returns:
        A Plotly figure with ``R × C`` heatmap traces on one shared colour axis (0–1).
    """
    w = _as_array(attn)
    if w.ndim != 4:
        raise ValueError(f"the grid needs [layers, heads, q, k], got {w.shape}")
    n_rows, n_cols, q_len, k_len = w.shape
    _check_labels(w.shape, q_labels, k_labels)
    row_names = list(row_names) if row_names is not None else [f"layer {i + 1}" for i in range(n_rows)]
    col_names = list(col_names) if col_names is not None else [f"head {j + 1}" for j in range(n_cols)]
    z_all = causal_blank(w) if causal else w
    n = max(q_len, k_len)
    labelled = n <= GRID_LABEL_LIMIT
    q_disp = [display_token(t) for t in q_labels]
    k_disp = [display_token(t) for t in k_labels]
    hover = None
    if n_rows * n_cols * q_len * k_len <= GRID_HOVER_CELLS:
        hover = np.array([[f"{plotly_escape(q)} → {plotly_escape(k)}" for k in k_disp] for q in q_disp])

    fig = make_subplots(
        rows=n_rows, cols=n_cols,
        subplot_titles=[f"{r} · {c}" for r in row_names for c in col_names],
        horizontal_spacing=min(0.04 if not labelled else 0.03, 0.3 / max(n_cols, 1)),
        vertical_spacing=min(0.08, 0.5 / max(n_rows, 1)),
    )
    for r in range(n_rows):
        for c in range(n_cols):
            name = f"{row_names[r]} · {col_names[c]}"
            fig.add_trace(
                go.Heatmap(
                    z=z_all[r, c], x=list(range(k_len)), y=list(range(q_len)), coloraxis="coloraxis",
                    customdata=hover, name=name,
                    hovertemplate=(f"{plotly_escape(name)}<br>"
                                   + ("%{customdata}" if hover is not None else "query %{y} → key %{x}")
                                   + "<br>weight %{z:.3f}<extra></extra>"),
                    xgap=1 if n <= 40 else 0, ygap=1 if n <= 40 else 0,
                ),
                row=r + 1, col=c + 1,
            )
    tick_font = dict(family=MONO, size=11 if n <= 12 else 9, color=TEXT_COLOR)
    fig.update_xaxes(showgrid=False, zeroline=False, showticklabels=False, ticks="")
    fig.update_yaxes(showgrid=False, zeroline=False, showticklabels=False, ticks="", autorange="reversed")
    if labelled:
        for c in range(n_cols):
            fig.update_xaxes(showticklabels=True, tickvals=list(range(k_len)), ticktext=[_short(t, 10) for t in k_disp],
                             tickangle=-60, tickfont=tick_font, automargin=True, row=n_rows, col=c + 1)
        for r in range(n_rows):
            fig.update_yaxes(showticklabels=True, tickvals=list(range(q_len)), ticktext=[_short(t, 10) for t in q_disp],
                             tickfont=tick_font, automargin=True, row=r + 1, col=1)
    panel = int(min(300, max(130, 16 * q_len + 40)))
    bottom = 20 + (7 * max((len(_short(t, 10)) for t in k_disp), default=1) if labelled else 0)
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=16, color=TEXT_COLOR)),
        font=FONT,
        height=n_rows * panel + 70 + bottom,
        margin=dict(l=10, r=10, t=70 if title else 40, b=bottom),
        plot_bgcolor=MASKED_BG if causal else WHITE,
        coloraxis=dict(colorscale=ATTENTION_SCALE, cmin=0.0, cmax=1.0,
                       colorbar=dict(title=dict(text="weight"), thickness=12, len=min(1.0, 300 / max(1, n_rows * panel)))),
    )
    fig.update_annotations(font=dict(size=12, color=TEXT_COLOR))
    if highlight is not None and 0 <= highlight[0] < n_rows and 0 <= highlight[1] < n_cols:
        idx = highlight[0] * n_cols + highlight[1] + 1
        suffix = "" if idx == 1 else str(idx)
        fig.add_shape(type="rect", xref=f"x{suffix} domain", yref=f"y{suffix} domain", x0=-0.03, x1=1.03, y0=-0.03,
                      y1=1.03, line=dict(color=HIGHLIGHT, width=3))
    return fig


def model_grid_altair(
    attn,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    causal: bool = False,
    selected: tuple[int, int] | None = None,
    cell: int | None = None,
) -> alt.Chart:
    """The model grid as one Altair chart whose click selects a head (selection parameter ``head_pick``).

    One rectangle per (layer, head, query, key), laid out in blocks (layers down, heads across) in a single
    view, so that ``st.altair_chart(..., on_select=…, selection_mode="head_pick")`` reports
    ``{"layer": l, "head": h}`` (1-based) for the clicked head. Masked decoder cells are left out.

    Args:
        attn: ``[layers, heads, q_len, k_len]``; keep ``layers·heads·q·k`` ≤ :data:`ALTAIR_GRID_CELLS`.
        selected: ``(layer, head)`` 0-based, drawn at full opacity while the others are dimmed (before a click).
        cell: pixels per cell (default adapts to the length).

    Raises:
        ValueError: wrong shape, labels that do not fit, or more cells than :data:`ALTAIR_GRID_CELLS`.
    """
    w = _as_array(attn)
    if w.ndim != 4:
        raise ValueError(f"the grid needs [layers, heads, q, k], got {w.shape}")
    n_layers, n_heads, q_len, k_len = w.shape
    _check_labels(w.shape, q_labels, k_labels)
    if w.size > ALTAIR_GRID_CELLS:
        raise ValueError(f"{w.size} cells is too many for the clickable grid (limit {ALTAIR_GRID_CELLS})")
    gap = max(2, round(0.25 * max(q_len, k_len)))
    bx, by = k_len + gap, q_len + gap
    layer, head, i, j = np.meshgrid(np.arange(n_layers), np.arange(n_heads), np.arange(q_len), np.arange(k_len),
                                    indexing="ij")
    keep = np.ones(w.shape, dtype=bool)
    if causal:
        keep &= (j <= i + (k_len - q_len))
    q_disp = np.array([display_token(t) for t in q_labels], dtype=object)
    k_disp = np.array([display_token(t) for t in k_labels], dtype=object)
    x0 = head * bx + j
    y0 = layer * by + i
    df = pd.DataFrame({
        "layer": (layer + 1)[keep], "head": (head + 1)[keep], "query": q_disp[i[keep]], "key": k_disp[j[keep]],
        "weight": w[keep].round(4), "x0": x0[keep], "x1": x0[keep] + 1, "y0": y0[keep], "y1": y0[keep] + 1,
    })
    stops = [s for s, _ in ATTENTION_SCALE]
    colors = [c for _, c in ATTENTION_SCALE]
    pick = alt.selection_point(name="head_pick", fields=["layer", "head"], on="click", clear="dblclick",
                               value=[{"layer": selected[0] + 1, "head": selected[1] + 1}] if selected else None)
    px = cell or int(max(4, min(18, 520 // max(1, n_heads * bx), 420 // max(1, n_layers * by))))
    x_axis = alt.Axis(values=[h * bx + k_len / 2 for h in range(n_heads)], labelExpr=f"'head ' + (floor(datum.value / {bx}) + 1)",
                      title=None, grid=False, ticks=False, domain=False, orient="top", labelFontSize=12)
    y_axis = alt.Axis(values=[l * by + q_len / 2 for l in range(n_layers)],
                      labelExpr=f"'layer ' + (floor(datum.value / {by}) + 1)", title=None, grid=False, ticks=False,
                      domain=False, labelFontSize=12)
    return (
        alt.Chart(df)
        .mark_rect(stroke=WHITE, strokeWidth=0.3 if px >= 8 else 0)
        .encode(
            x=alt.X("x0:Q", axis=x_axis, scale=alt.Scale(domain=[0, n_heads * bx - gap], nice=False)),
            x2="x1:Q",
            y=alt.Y("y0:Q", axis=y_axis, scale=alt.Scale(domain=[n_layers * by - gap, 0], nice=False)),
            y2="y1:Q",
            color=alt.Color("weight:Q", scale=alt.Scale(domain=stops, range=colors, clamp=True),
                            legend=alt.Legend(title="weight")),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.35)),
            tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("head:O"), alt.Tooltip("query:N"), alt.Tooltip("key:N"),
                     alt.Tooltip("weight:Q", format=".3f")],
        )
        .add_params(pick)
        .properties(width=px * (n_heads * bx - gap), height=px * (n_layers * by - gap))
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
    w = _as_array(weights)
    if w.ndim != 2:
        raise ValueError(f"one head [q, k] is needed, got {w.shape}")
    q_len, k_len = w.shape
    _check_labels(w.shape, q_labels, k_labels)
    q_disp = [display_token(t) for t in q_labels]
    k_disp = [display_token(t) for t in k_labels]
    rows = [query] if query is not None and 0 <= query < q_len else range(q_len)
    pairs = [(float(w[i, j]), i, j) for i in rows for j in range(k_len) if np.isfinite(w[i, j]) and w[i, j] >= threshold]
    pairs.sort()  # weakest first, so that the strong lines are drawn on top
    pairs = pairs[-max_lines:] if max_lines else pairs
    fig = go.Figure()
    for weight, i, j in pairs:
        fig.add_trace(go.Scatter(
            x=[0, 1], y=[i, j], mode="lines", opacity=weight, line=dict(color=LINE_COLOR, width=2.5),
            hoverinfo="skip", showlegend=False, meta=[i, j], name=f"{q_disp[i]} → {k_disp[j]}",
        ))
    marked = query if query is not None and 0 <= query < q_len else None
    fig.add_trace(go.Scatter(
        x=[0] * q_len, y=list(range(q_len)), mode="text+markers", text=q_disp, textposition="middle left",
        textfont=dict(family=MONO, size=14, color=[HIGHLIGHT if i == marked else TEXT_COLOR for i in range(q_len)]),
        marker=dict(size=7, color=[HIGHLIGHT if i == marked else LINE_COLOR for i in range(q_len)]),
        hovertemplate="query %{text} (row %{y})<extra></extra>", showlegend=False, name="queries",
    ))
    fig.add_trace(go.Scatter(
        x=[1] * k_len, y=list(range(k_len)), mode="text+markers", text=k_disp, textposition="middle right",
        textfont=dict(family=MONO, size=14, color=TEXT_COLOR), marker=dict(size=7, color=LINE_COLOR),
        hovertemplate="key %{text} (column %{y})<extra></extra>", showlegend=False, name="keys",
    ))
    n = max(q_len, k_len)
    longest = max((len(t) for t in q_disp + k_disp), default=4)
    pad = min(1.5, 0.1 + 0.045 * longest)
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=16, color=TEXT_COLOR)),
        font=FONT, height=min(1400, 90 + 28 * n), margin=dict(l=10, r=10, t=60 if title else 30, b=10),
        plot_bgcolor=WHITE,
    )
    fig.update_xaxes(visible=False, range=[-pad, 1 + pad])
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.add_annotation(x=0, y=-0.9, text="queries", showarrow=False, font=dict(size=13, color=SUBTLE), xanchor="right")
    fig.add_annotation(x=1, y=-0.9, text="keys", showarrow=False, font=dict(size=13, color=SUBTLE), xanchor="left")
    return fig


def token_bar_figure(
    weights,
    labels: Sequence[str],
    title: str = "",
    mark: int | None = None,
    axis_title: str = "keys",
    value_title: str = "weight",
) -> go.Figure:
    """Weights over tokens as bars, on a fixed 0–1 axis (one row or one column of an attention matrix).

    Args:
        weights: ``[n]``; NaN (a masked position) is drawn as 0.
        labels: ``n`` BPE pieces; mark: index of a bar drawn in the highlight colour (e.g. the query itself).
    """
    w = np.nan_to_num(_as_array(weights).reshape(-1))
    if len(w) != len(labels):
        raise ValueError("one weight per token is needed")
    disp = [display_token(t) for t in labels]
    colors = [HIGHLIGHT if i == mark else LINE_COLOR for i in range(len(w))]
    fig = go.Figure(go.Bar(
        x=list(range(len(w))), y=w, marker_color=colors, customdata=disp,
        hovertemplate="%{customdata} (position %{x})<br>" + value_title + " %{y:.3f}<extra></extra>",
        text=[f"{v:.2f}" if v >= 0.005 else "" for v in w], textposition="outside", cliponaxis=False,
    ))
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=15, color=TEXT_COLOR)), font=FONT,
        height=340, margin=dict(l=10, r=10, t=50 if title else 20, b=10), plot_bgcolor=WHITE, bargap=0.2,
    )
    fig.update_xaxes(tickvals=list(range(len(w))), ticktext=[_short(t) for t in disp], tickangle=-45,
                     tickfont=dict(family=MONO, size=13 if len(w) <= 24 else 10), title_text=axis_title, automargin=True)
    fig.update_yaxes(range=[0, 1.1], title_text=value_title, gridcolor=GRID, automargin=True)
    return fig


def head_stat_heatmap(
    values,
    name: str,
    diverging: bool = False,
    zmin: float | None = None,
    zmax: float | None = None,
    title: str | None = None,
    row_label: str = "layer",
    decimals: int = 2,
) -> go.Figure:
    """One number per head as a layers × heads heatmap, each cell annotated with its value.

    Args:
        values: ``[layers, heads]``.
        name: what the number is (colour-bar title and hover).
        diverging: a red–white–blue scale centred at 0 (e.g. the ablation drop in log-probability: red =
            removing the head hurts, blue = removing it helps), symmetric around 0.
        zmin / zmax: colour range for a sequential scale (default: the data's range, 0 at least for ``zmin``).

    Returns:
        A Plotly figure with one ``[layers, heads]`` heatmap; rows ``layer 1…``, columns ``head 1…``.
    """
    v = _as_array(values)
    if v.ndim != 2:
        raise ValueError(f"one value per head [layers, heads] is needed, got {v.shape}")
    n_rows, n_cols = v.shape
    finite = v[np.isfinite(v)]
    if diverging:
        bound = float(np.abs(finite).max()) if finite.size else 1.0
        bound = bound or 1.0
        scale = dict(colorscale="RdBu", reversescale=True, zmid=0.0, zmin=-bound, zmax=bound)
    else:
        lo = zmin if zmin is not None else min(0.0, float(finite.min()) if finite.size else 0.0)
        hi = zmax if zmax is not None else (float(finite.max()) if finite.size else 1.0)
        scale = dict(colorscale=ATTENTION_SCALE, zmin=lo, zmax=hi if hi > lo else lo + 1.0)
    fig = go.Figure(go.Heatmap(
        z=v, x=[f"head {j + 1}" for j in range(n_cols)], y=[f"{row_label} {i + 1}" for i in range(n_rows)],
        texttemplate=f"%{{z:.{decimals}f}}", textfont=dict(size=13),
        hovertemplate="%{y} · %{x}<br>" + plotly_escape(name) + " %{z:.3f}<extra></extra>",
        xgap=2, ygap=2, colorbar=dict(title=dict(text=name), thickness=14), **scale,
    ))
    fig.update_layout(
        title=dict(text=title if title is not None else name, x=0.0, xanchor="left", font=dict(size=16, color=TEXT_COLOR)),
        font=FONT, height=140 + 56 * n_rows, margin=dict(l=10, r=10, t=50, b=10), plot_bgcolor=WHITE,
    )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(side="top", automargin=True)
    return fig


def log_prob_figure(labels: Sequence[str], base, ablated=None, title: str = "") -> go.Figure:
    """Per-token log-probabilities of a translation, with and without ablated heads, as grouped bars.

    Args:
        labels: the ``n`` scored pieces ``y₁ … yₙ``.
        base: ``[n]`` log-probabilities with every head; ablated: ``[n]`` with the heads removed, or ``None``.
    """
    b = _as_array(base).reshape(-1)
    if len(b) != len(labels):
        raise ValueError("one log-probability per token is needed")
    disp = [display_token(t) for t in labels]
    x = list(range(len(b)))
    fig = go.Figure(go.Bar(x=x, y=b, name="all heads", marker_color=PALE_BLUE, customdata=disp,
                           hovertemplate="%{customdata}<br>all heads: %{y:.3f}<extra></extra>"))
    if ablated is not None:
        a = _as_array(ablated).reshape(-1)
        if len(a) != len(b):
            raise ValueError("base and ablated need the same length")
        fig.add_trace(go.Bar(x=x, y=a, name="heads removed", marker_color=HIGHLIGHT, customdata=disp,
                             hovertemplate="%{customdata}<br>heads removed: %{y:.3f}<extra></extra>"))
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=15, color=TEXT_COLOR)), font=FONT, barmode="group",
        height=360, margin=dict(l=10, r=10, t=50 if title else 20, b=10), plot_bgcolor=WHITE,
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
    )
    fig.update_xaxes(tickvals=x, ticktext=[_short(t) for t in disp], tickangle=-45, automargin=True,
                     tickfont=dict(family=MONO, size=13 if len(b) <= 24 else 10), title_text="translation tokens")
    fig.update_yaxes(title_text="log-probability (nats)", gridcolor=GRID, zerolinecolor=ZERO_LINE, automargin=True)
    return fig


def difference_heatmap(a, b, q_labels: Sequence[str], k_labels: Sequence[str], title: str = "") -> go.Figure:
    """Cell-by-cell difference ``b − a`` of two attention maps of the same shape ``[q_len, k_len]``.

    Red = the second attends more, blue = the first attends more; the scale is symmetric around 0 and
    masked (NaN) cells stay empty. Rows = queries, columns = keys.

    Raises:
        ValueError: the two maps differ in shape (there is no cell-by-cell difference then).
    """
    a_arr, b_arr = _as_array(a), _as_array(b)
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"shapes differ: {a_arr.shape} vs {b_arr.shape}")
    diff = b_arr - a_arr
    finite = diff[np.isfinite(diff)]
    bound = float(np.abs(finite).max()) if finite.size else 1.0
    q_disp = [_short(display_token(t)) for t in q_labels]
    k_disp = [_short(display_token(t)) for t in k_labels]
    fig = go.Figure(go.Heatmap(
        z=diff, x=list(range(diff.shape[1])), y=list(range(diff.shape[0])), colorscale="RdBu", reversescale=True,
        zmid=0.0, zmin=-(bound or 1.0), zmax=bound or 1.0, xgap=1, ygap=1,
        hovertemplate="row %{y}, column %{x}<br>difference %{z:+.3f}<extra></extra>",
        colorbar=dict(title=dict(text="second − first"), thickness=14),
    ))
    tick_font = dict(family=MONO, size=13, color=TEXT_COLOR)
    fig.update_layout(title=dict(text=title, x=0.0, xanchor="left"), font=FONT, plot_bgcolor=MASKED_BG,
                      height=min(900, 200 + 30 * diff.shape[0]), margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    fig.update_xaxes(tickvals=list(range(len(k_disp))), ticktext=k_disp, tickangle=-45, tickfont=tick_font,
                     title_text="keys (attended to) →", automargin=True, showgrid=False)
    fig.update_yaxes(tickvals=list(range(len(q_disp))), ticktext=q_disp, autorange="reversed", tickfont=tick_font,
                     title_text="queries (attending) ↓", automargin=True, showgrid=False)
    return fig
