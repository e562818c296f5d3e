"""The model grid: every head of every layer at once, as small heatmaps (Plotly) or one clickable chart (Altair).

Pure functions from weight arrays (tensors or numpy) and token labels to figures; no Streamlit, no model.
Conventions as in :mod:`viz.attention`: rows = queries, columns = keys, every weight on the fixed 0–1 scale
:data:`viz.theme.ATTENTION_SCALE`.
"""

from __future__ import annotations

from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from viz import theme
from viz.attention import as_array, causal_blank, check_labels
from viz.theme import ACCENT as HIGHLIGHT
from viz.theme import ATTENTION_SCALE, FONT, LINE_EM, MASKED_BG, MIN_READABLE, MONO, PAGE_PX, WHITE, label_plan
from viz.theme import INK as TEXT_COLOR
from viz.token_labels import display_token, label_px, plotly_escape, shorten

#: Above this many tokens on a side, the grid's small panels carry no tick labels (hover still names the pair).
GRID_LABEL_LIMIT = 24
#: The smallest size (px) of the grid's key labels: smaller, they read as ~8 px on a slide.
GRID_SMALLEST = 12
#: Room (px) between two rows of panels: one panel title (14 px) and a little air.
PANEL_GAP_PX = 34
#: Room (px) the grid's shared colour bar takes at its right.
GRID_COLORBAR_PX = 70
#: Pixels per query row of a labelled panel, so that 14 px labels do not overlap.
LABEL_ROW_PX = 18
#: Above this many cells in all, the grid's hover shows positions only (per-cell label strings get heavy).
GRID_HOVER_CELLS = 60_000
#: Cells (layers × heads × queries × keys) up to which the clickable Altair grid is offered.
ALTAIR_GRID_CELLS = 40_000


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
            when a side has more than :data:`GRID_LABEL_LIMIT` pieces; key labels level where they fit a panel's
            columns, else upright, at :data:`GRID_SMALLEST` px at least, and none when not every key fits:
            the head opened below the grid names them all).
        causal: blank the masked upper triangle.
        row_names / col_names: panel titles are ``"{row} · {col}"`` (default ``layer i`` / ``head j``).
        highlight: ``(row, col)`` of a panel to outline (the head currently open).

    Returns:
        A Plotly figure with ``R × C`` heatmap traces on one shared colour axis (0–1).
    """
    w = as_array(attn)
    if w.ndim != 4:
        raise ValueError(f"the grid needs [layers, heads, q, k], got {w.shape}")
    n_rows, n_cols, q_len, k_len = w.shape
    check_labels(w.shape, q_labels, k_labels)
    row_names = list(row_names) if row_names is not None else [f"layer {i + 1}" for i in range(n_rows)]
    col_names = list(col_names) if col_names is not None else [f"head {j + 1}" for j in range(n_cols)]
    z_all = causal_blank(w) if causal else w
    n = max(q_len, k_len)
    labelled = n <= GRID_LABEL_LIMIT
    q_disp = [display_token(t) for t in q_labels]
    k_disp = [display_token(t) for t in k_labels]
    h_spacing = min(0.04 if not labelled else 0.03, 0.3 / max(n_cols, 1))
    # The key labels are laid out for one panel's width on a page-wide chart at 1280×720.
    q_short, k_short = [shorten(t, 10) for t in q_disp], [shorten(t, 10) for t in k_disp]
    plot_px = PAGE_PX - 20 - GRID_COLORBAR_PX - (label_px(q_short, MIN_READABLE) + 10 if labelled else 0)
    panel_px = plot_px * (1 - h_spacing * (n_cols - 1)) / max(n_cols, 1)
    # every key or none: a label left out cannot be read from a projector, and the head opened below the grid
    # names every key; the grid's panels have no room for a second tier of labels
    plan = label_plan(k_short, max(panel_px, 1.0), smallest=GRID_SMALLEST, max_tiers=1)
    key_labels = labelled and plan.fits
    hover = None
    if n_rows * n_cols * q_len * k_len <= GRID_HOVER_CELLS:
        hover = np.array([[f"{plotly_escape(q)} → {plotly_escape(k)}" for k in k_disp] for q in q_disp])

    # Laid out in pixels: a panel's rows a line each when labelled, and between two rows of panels only the room of
    # a panel title. As fractions of the figure (0.08 of it between rows) six layers left 13-px rows under 136-px gaps.
    row_px = max(LABEL_ROW_PX, LINE_EM * MIN_READABLE + 2) if labelled else min(16.0, 260 / max(q_len, 1))
    panel = int(max(90, row_px * q_len))
    top = 70 if title else 40
    under = (LINE_EM * plan.size if plan.angle == 0 else label_px(k_short, plan.size)) + 10
    bottom = int(20 + under) if key_labels else 20
    plot_h = n_rows * panel + (n_rows - 1) * PANEL_GAP_PX
    v_spacing = PANEL_GAP_PX / plot_h if n_rows > 1 else 0.0
    tick_font = dict(family=MONO, size=plan.size, color=TEXT_COLOR)
    hidden = dict(showgrid=False, zeroline=False, showticklabels=False, ticks="")
    data: list[dict] = []
    layout: dict = dict(
        title=theme.title(title),
        font=FONT,
        height=int(top + plot_h + bottom),
        margin=dict(l=10, r=10, t=top, b=bottom),
        plot_bgcolor=MASKED_BG if causal else WHITE,
        coloraxis=dict(
            colorscale=ATTENTION_SCALE,
            cmin=0.0,
            cmax=1.0,
            colorbar=dict(title=dict(text="weight"), thickness=12, len=min(1.0, 300 / max(1, n_rows * panel))),
        ),
        annotations=[],
    )
    for r, c, (x0, x1), (y0, y1) in subplot_domains(n_rows, n_cols, h_spacing, v_spacing):
        i = r * n_cols + c + 1
        suffix = "" if i == 1 else str(i)
        name = f"{row_names[r]} · {col_names[c]}"
        data.append(
            dict(
                type="heatmap",
                z=z_all[r, c],
                x=list(range(k_len)),
                y=list(range(q_len)),
                coloraxis="coloraxis",
                customdata=hover,
                name=name,
                xaxis=f"x{suffix}",
                yaxis=f"y{suffix}",
                hovertemplate=(
                    f"{plotly_escape(name)}<br>"
                    + ("%{customdata}" if hover is not None else "query %{y} → key %{x}")
                    + "<br>weight %{z:.3f}<extra></extra>"
                ),
                xgap=1 if n <= 40 else 0,
                ygap=1 if n <= 40 else 0,
            )
        )
        xaxis = dict(hidden, anchor=f"y{suffix}", domain=[x0, x1])
        yaxis = dict(hidden, anchor=f"x{suffix}", domain=[y0, y1], autorange="reversed")
        if key_labels and r == n_rows - 1:
            xaxis.update(
                showticklabels=True,
                tickvals=list(range(k_len)),
                ticktext=k_short,
                tickangle=plan.angle,
                tickfont=tick_font,
                automargin=True,
            )
        if labelled and c == 0:
            yaxis.update(
                showticklabels=True,
                tickvals=list(range(q_len)),
                ticktext=q_short,
                tickfont=dict(tick_font, size=MIN_READABLE),
                automargin=True,
            )
        layout[f"xaxis{suffix}"], layout[f"yaxis{suffix}"] = xaxis, yaxis
        layout["annotations"].append(
            dict(  # the panel's title, over its top edge
                text=name,
                x=(x0 + x1) / 2,
                y=y1,
                xref="paper",
                yref="paper",
                xanchor="center",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=MIN_READABLE, color=TEXT_COLOR),
            )
        )
    if highlight is not None and 0 <= highlight[0] < n_rows and 0 <= highlight[1] < n_cols:
        idx = highlight[0] * n_cols + highlight[1] + 1
        suffix = "" if idx == 1 else str(idx)
        layout["shapes"] = [
            dict(
                type="rect",
                xref=f"x{suffix} domain",
                yref=f"y{suffix} domain",
                x0=-0.03,
                x1=1.03,
                y0=-0.03,
                y1=1.03,
                line=dict(color=HIGHLIGHT, width=3),
            )
        ]
    return theme.figure(data, layout)


def subplot_domains(n_rows: int, n_cols: int, h_spacing: float, v_spacing: float):
    """``(row, col, x domain, y domain)`` of every panel of an ``n_rows × n_cols`` grid, row 0 at the top, as
    ``plotly.subplots.make_subplots`` lays them out (fractions of the plot area; ``h_spacing`` / ``v_spacing``
    between panels), without building a figure."""
    width = (1.0 - h_spacing * (n_cols - 1)) / n_cols
    height = (1.0 - v_spacing * (n_rows - 1)) / n_rows
    for r in range(n_rows):
        top = 1.0 - r * (height + v_spacing)
        for c in range(n_cols):
            left = c * (width + h_spacing)
            # clamped: the sums round to a hair outside [0, 1] (-6e-17), which Plotly refuses
            yield r, c, (max(left, 0.0), min(left + width, 1.0)), (max(top - height, 0.0), min(top, 1.0))


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
    w = as_array(attn)
    if w.ndim != 4:
        raise ValueError(f"the grid needs [layers, heads, q, k], got {w.shape}")
    n_layers, n_heads, q_len, k_len = w.shape
    check_labels(w.shape, q_labels, k_labels)
    if w.size > ALTAIR_GRID_CELLS:
        raise ValueError(f"{w.size} cells is too many for the clickable grid (limit {ALTAIR_GRID_CELLS})")
    gap = max(2, round(0.25 * max(q_len, k_len)))
    bx, by = k_len + gap, q_len + gap
    layer, head, i, j = np.meshgrid(
        np.arange(n_layers), np.arange(n_heads), np.arange(q_len), np.arange(k_len), indexing="ij"
    )
    keep = np.ones(w.shape, dtype=bool)
    if causal:
        keep &= j <= i + (k_len - q_len)
    q_disp = np.array([display_token(t) for t in q_labels], dtype=object)
    k_disp = np.array([display_token(t) for t in k_labels], dtype=object)
    x0 = head * bx + j
    y0 = layer * by + i
    df = pd.DataFrame(
        {
            "layer": (layer + 1)[keep],
            "head": (head + 1)[keep],
            "query": q_disp[i[keep]],
            "key": k_disp[j[keep]],
            "weight": w[keep].round(4),
            "x0": x0[keep],
            "x1": x0[keep] + 1,
            "y0": y0[keep],
            "y1": y0[keep] + 1,
        }
    )
    stops = [s for s, _ in ATTENTION_SCALE]
    colors = [c for _, c in ATTENTION_SCALE]
    pick = alt.selection_point(
        name="head_pick",
        fields=["layer", "head"],
        on="click",
        clear="dblclick",
        value=[{"layer": selected[0] + 1, "head": selected[1] + 1}] if selected else None,
    )
    px = cell or int(max(4, min(18, 520 // max(1, n_heads * bx), 420 // max(1, n_layers * by))))
    x_axis = alt.Axis(
        values=[h * bx + k_len / 2 for h in range(n_heads)],
        labelExpr=f"'head ' + (floor(datum.value / {bx}) + 1)",
        title=None,
        grid=False,
        ticks=False,
        domain=False,
        orient="top",
        labelFontSize=MIN_READABLE,
    )
    y_axis = alt.Axis(
        values=[layer * by + q_len / 2 for layer in range(n_layers)],
        labelExpr=f"'layer ' + (floor(datum.value / {by}) + 1)",
        title=None,
        grid=False,
        ticks=False,
        domain=False,
        labelFontSize=MIN_READABLE,
    )
    return (
        alt.Chart(df)
        .mark_rect(stroke=WHITE, strokeWidth=0.3 if px >= 8 else 0)
        .encode(
            x=alt.X("x0:Q", axis=x_axis, scale=alt.Scale(domain=[0, n_heads * bx - gap], nice=False)),
            x2="x1:Q",
            y=alt.Y("y0:Q", axis=y_axis, scale=alt.Scale(domain=[n_layers * by - gap, 0], nice=False)),
            y2="y1:Q",
            color=alt.Color(
                "weight:Q", scale=alt.Scale(domain=stops, range=colors, clamp=True), legend=alt.Legend(title="weight")
            ),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.35)),
            tooltip=[
                alt.Tooltip("layer:O"),
                alt.Tooltip("head:O"),
                alt.Tooltip("query:N"),
                alt.Tooltip("key:N"),
                alt.Tooltip("weight:Q", format=".3f"),
            ],
        )
        .add_params(pick)
        .properties(width=px * (n_heads * bx - gap), height=px * (n_layers * by - gap))
    )
