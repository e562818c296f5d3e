"""Figures and HTML for the teaching pages (positional encoding, tokenization, worked examples).

Pure functions from arrays / strings to Plotly figures or HTML fragments: no Streamlit, no model, no math of
the model's (RoPE angles, ALiBi slopes and the like are computed in :mod:`teaching.positions` with the model's
own code, and drawn here).
"""

from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.theme import (ACCENT, BLUE, CELL_BG, CELL_BORDER, CHIP_BORDER, CHIP_COLOURS, EMPTY_BG, ERROR_BG,
                       ERROR_BORDER, FONT, HIGHLIGHT_BG, MASKED_BG, MUTED, WHITE, legend_above)

DIVERGING = "RdBu"


def _layout(fig: go.Figure, title: str, height: int, xtitle: str = "", ytitle: str = "") -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.0, xanchor="left"), font=FONT, height=height,
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10), plot_bgcolor=WHITE)
    fig.update_xaxes(title_text=xtitle, automargin=True)
    fig.update_yaxes(title_text=ytitle, automargin=True)
    return fig


# --- positional encoding ------------------------------------------------------------------------------
def matrix_heatmap(z, title: str = "", xtitle: str = "dimension", ytitle: str = "position",
                   colorscale=DIVERGING, zmid: float | None = 0.0, height: int = 420) -> go.Figure:
    """A large matrix ``[rows, cols]`` (e.g. the PE table ``[positions, d_model]``) as a heatmap, row 0 on top."""
    z = np.asarray(z, dtype=float)
    if z.ndim != 2:
        raise ValueError(f"expected a matrix, got shape {z.shape}")
    fig = go.Figure(go.Heatmap(z=z, colorscale=colorscale, zmid=zmid, colorbar=dict(thickness=14),
                               hovertemplate=f"{ytitle} %{{y}}<br>{xtitle} %{{x}}<br>%{{z:.4f}}<extra></extra>"))
    fig = _layout(fig, title, height, xtitle, ytitle)
    fig.update_yaxes(autorange="reversed")
    return fig


def dimension_waves(table, dims: Sequence[int], title: str = "") -> go.Figure:
    """Columns ``dims`` of ``table [positions, d_model]`` as lines over position (even = sin, odd = cos)."""
    table = np.asarray(table, dtype=float)
    fig = go.Figure()
    x = np.arange(table.shape[0])
    for d in dims:
        if 0 <= d < table.shape[1]:
            kind = "sin" if d % 2 == 0 else "cos"
            fig.add_trace(go.Scatter(x=x, y=table[:, d], mode="lines", name=f"dim {d} ({kind}, i={d // 2})"))
    return _layout(fig, title, 360, "position", "value")


def norm_histogram(embedding_norms, pe_norms, title: str = "") -> go.Figure:
    """Overlaid histograms: ``‖embedding · √d_model‖`` per vocabulary entry vs ``‖PE(pos)‖`` per position."""
    fig = go.Figure()
    fig.add_trace(go.Histogram(x=np.asarray(embedding_norms, dtype=float), name="‖token embedding × √d_model‖",
                               opacity=0.65, marker_color=BLUE, bingroup="norms"))
    # the same bins for both: alone, a sinusoidal table's norms (all √(d_model/2)) got a zero-width bin, not drawn
    fig.add_trace(go.Histogram(x=np.asarray(pe_norms, dtype=float), name="‖PE(pos)‖", opacity=0.65,
                               marker_color=ACCENT, bingroup="norms"))
    fig = _layout(fig, title, 400, "vector norm", "count")
    # the legend above the plot, under the title: below it, it sat on the x-axis title
    fig.update_layout(barmode="overlay", legend=legend_above(), title_y=0.97, title_yanchor="top",
                      margin=dict(t=100))
    return fig


def bar(x: Sequence, y: Sequence[float], title: str = "", xtitle: str = "", ytitle: str = "") -> go.Figure:
    """A plain bar chart (e.g. ALiBi slopes per head, piece lengths)."""
    fig = go.Figure(go.Bar(x=list(x), y=list(y), marker_color=BLUE))
    return _layout(fig, title, 320, xtitle, ytitle)


# --- worked examples ----------------------------------------------------------------------------------
def annotated_matrix(z, title: str = "", row_labels: Sequence[str] | None = None,
                     col_labels: Sequence[str] | None = None, decimals: int = 4) -> go.Figure:
    """A small matrix with every value written in its cell (``decimals`` places); ``−∞`` cells read "−∞"."""
    z = np.atleast_2d(np.asarray(z, dtype=float))
    rows, cols = z.shape
    rl = list(row_labels) if row_labels is not None else [f"row {i}" for i in range(rows)]
    cl = list(col_labels) if col_labels is not None else [f"col {j}" for j in range(cols)]
    text = [["−∞" if np.isneginf(v) else ("∞" if np.isposinf(v) else f"{v:.{decimals}f}") for v in r] for r in z]
    shown = np.where(np.isfinite(z), z, np.nan)
    fig = go.Figure(go.Heatmap(z=shown, x=cl, y=rl, text=text, texttemplate="%{text}", colorscale="Blues",
                               showscale=False, xgap=2, ygap=2, hoverinfo="skip"))
    fig = _layout(fig, title, 110 + 42 * rows)
    # column names sit on top: room for them under the title, which they touched with the default margin
    fig.update_layout(plot_bgcolor=MASKED_BG, margin=dict(t=80 if title else 40))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(side="top")
    return fig


def scaling_chart(rows: Sequence[dict]) -> go.Figure:
    """Largest softmax weight vs ``d_k`` with and without ÷√d_k (rows from ``teaching.worked.scaling_demo``)."""
    d = [str(r["d_k"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=d, y=[r["max_raw"] for r in rows], mode="lines+markers", name="q·k (no scaling)"))
    fig.add_trace(go.Scatter(x=d, y=[r["max_scaled"] for r in rows], mode="lines+markers", name="q·k / √d_k"))
    fig.update_yaxes(range=[0, 1.05])
    return _layout(fig, "Largest of 10 softmax weights", 340, "d_k", "max weight")


# --- tokenization -------------------------------------------------------------------------------------
def _chip(top: str, bottom: str, bg: str, border: str = CHIP_BORDER, dashed: bool = False) -> str:
    style = (f"display:inline-block;margin:2px 3px;padding:3px 6px;border-radius:5px;background:{bg};"
             f"border:1px {'dashed' if dashed else 'solid'} {border};text-align:center;vertical-align:top")
    return (f'<span style="{style}"><span style="font-family:monospace;font-size:1.15rem;white-space:pre">{top}</span>'
            f'<br><span style="font-size:0.75rem;color:{MUTED};font-family:monospace">{bottom}</span></span>')


def token_spans_html(text: str, tokens: Sequence[str], ids: Sequence[int], offsets: Sequence[tuple[int, int]],
                     unk: str = "<unk>") -> str:
    """The text split into its tokens' character spans, alternately coloured, piece and id under each.

    A space inside a span shows as ``␣``; a token with an empty span (a lone ``▁`` word-start marker) is drawn
    dashed with "∅"; ``<unk>`` pieces are red and show the characters they replaced. Safe HTML (escaped).
    """
    chips = []
    for n, (piece, tid, (s, e)) in enumerate(zip(tokens, ids, offsets)):
        chars = text[s:e]
        bottom = f"{html.escape(piece)} · {int(tid)}"
        if piece == unk:
            chips.append(_chip(html.escape(chars.replace(" ", "␣")) or "∅", bottom, ERROR_BG, ERROR_BORDER))
        elif s == e:
            chips.append(_chip("∅", bottom + " · empty span", EMPTY_BG, dashed=True))
        else:
            chips.append(_chip(html.escape(chars.replace(" ", "␣")), bottom, CHIP_COLOURS[n % 2]))
    return '<div style="line-height:2.6">' + "".join(chips) + "</div>"


def cell_html(text: str) -> str:
    """Escaped for HTML and safe inside a Markdown table cell (``|`` would end the cell)."""
    return html.escape(text).replace("|", "&#124;")


def pieces_html(pieces: Sequence[str], highlight: Sequence[bool] | None = None) -> str:
    """Pieces as chips (``▁`` kept visible); chips with ``highlight[i]`` are outlined (e.g. just merged)."""
    out = []
    for i, p in enumerate(pieces):
        on = bool(highlight[i]) if highlight is not None else False
        out.append(f'<span style="display:inline-block;margin:1px 2px;padding:1px 6px;border-radius:4px;'
                   f'font-family:monospace;font-size:1.05rem;background:{HIGHLIGHT_BG if on else CELL_BG};'
                   f'border:{f"2px solid {ACCENT}" if on else f"1px solid {CELL_BORDER}"}">{cell_html(p)}</span>')
    return "".join(out)
