"""Figures and HTML for the teaching pages (positional encoding, tokenization, worked examples).

Pure functions from arrays / strings to Plotly figures or HTML fragments: no Streamlit, no model, no math of
the model's (RoPE angles, ALiBi slopes and the like are computed in :mod:`teaching.positions` with the model's
own code, and drawn here).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.theme import (
    ACCENT,
    BLUE,
    CELL_BG,
    CELL_BORDER,
    CELL_TEXT_PX,
    CHIP_BORDER,
    CHIP_COLOURS,
    EMPTY_BG,
    ERROR_BG,
    ERROR_BORDER,
    FONT,
    GRID,
    HIGHLIGHT_BG,
    MASKED_BG,
    MATRIX_SCALE,
    MUTED,
    SUBTLE,
    WHITE,
    escape_html,
    figure,
    legend_above,
)

DIVERGING = "RdBu"


def _layout(fig: go.Figure, title: str, height: int, xtitle: str = "", ytitle: str = "") -> go.Figure:
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left"),
        font=FONT,
        height=height,
        margin=dict(l=10, r=10, t=50 if title else 20, b=10),
        plot_bgcolor=WHITE,
    )
    fig.update_xaxes(title_text=xtitle, automargin=True)
    fig.update_yaxes(title_text=ytitle, automargin=True)
    return fig


# --- positional encoding ------------------------------------------------------------------------------
def matrix_heatmap(
    z,
    title: str = "",
    xtitle: str = "dimension",
    ytitle: str = "position",
    colorscale=DIVERGING,
    zmid: float | None = 0.0,
    height: int = 420,
) -> go.Figure:
    """A large matrix ``[rows, cols]`` (e.g. the PE table ``[positions, d_model]``) as a heatmap, row 0 on top."""
    z = np.asarray(z, dtype=float)
    if z.ndim != 2:
        raise ValueError(f"expected a matrix, got shape {z.shape}")
    fig = go.Figure(
        go.Heatmap(
            z=z,
            colorscale=colorscale,
            zmid=zmid,
            colorbar=dict(thickness=14),
            hovertemplate=f"{ytitle} %{{y}}<br>{xtitle} %{{x}}<br>%{{z:.4f}}<extra></extra>",
        )
    )
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
    """Overlaid histograms: ``‖embedding · √d_model‖`` per vocabulary entry vs ``‖PE(pos)‖`` per position.

    Both share bins computed here, none with a value on its left edge, and the x axis spans every bin with a
    bin's margin on each side. Left to Plotly's autorange, the axis of a sinusoidal table (every ‖PE(pos)‖ the
    same, √(d_model/2), below every embedding norm) began at that value and cut its bar in half.
    """
    emb, pe = np.asarray(embedding_norms, dtype=float), np.asarray(pe_norms, dtype=float)
    both = np.concatenate([emb, pe])
    edges = np.histogram_bin_edges(both, bins=min(100, max(10, int(np.sqrt(both.size)))))
    size = float(edges[1] - edges[0]) or 1.0  # one value only: a bin of width 1 around it
    start = float(edges[0]) - size / 2  # no value on a bin's left edge
    n_bins = int(np.ceil((float(edges[-1]) - start) / size)) + 1
    bins = dict(start=start, end=start + n_bins * size, size=size)
    fig = go.Figure()
    fig.add_trace(go.Histogram(x=emb, name="‖token embedding × √d_model‖", opacity=0.65, marker_color=BLUE, xbins=bins))
    fig.add_trace(go.Histogram(x=pe, name="‖PE(pos)‖", opacity=0.65, marker_color=ACCENT, xbins=bins))
    fig = _layout(fig, title, 400, "vector norm", "count")
    fig.update_xaxes(range=[bins["start"] - size, bins["end"] + size])
    # the legend above the plot, under the title: below it, it sat on the x-axis title
    fig.update_layout(barmode="overlay", legend=legend_above(), title_y=0.97, title_yanchor="top", margin=dict(t=100))
    return fig


def bar(x: Sequence, y: Sequence[float], title: str = "", xtitle: str = "", ytitle: str = "") -> go.Figure:
    """A plain bar chart (e.g. ALiBi slopes per head, piece lengths)."""
    fig = go.Figure(go.Bar(x=list(x), y=list(y), marker_color=BLUE))
    return _layout(fig, title, 320, xtitle, ytitle)


# --- worked examples ----------------------------------------------------------------------------------
def annotated_matrix(
    z,
    title: str = "",
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    decimals: int = 4,
) -> go.Figure:
    """A small matrix with every value written in its cell (``decimals`` places); ``−∞`` cells read "−∞".

    Built from plain dicts in one go (:func:`viz.theme.figure`): a worked example draws a dozen of these at every
    click, and Plotly's update calls took 9 ms for each."""
    z = np.atleast_2d(np.asarray(z, dtype=float))
    rows, cols = z.shape
    rl = list(row_labels) if row_labels is not None else [f"row {i}" for i in range(rows)]
    cl = list(col_labels) if col_labels is not None else [f"col {j}" for j in range(cols)]
    text = [["−∞" if np.isneginf(v) else ("∞" if np.isposinf(v) else f"{v:.{decimals}f}") for v in r] for r in z]
    shown = np.where(np.isfinite(z), z, np.nan)
    heatmap = dict(
        type="heatmap",
        z=shown,
        x=cl,
        y=rl,
        text=text,
        texttemplate="%{text}",
        colorscale=MATRIX_SCALE,
        textfont=dict(size=CELL_TEXT_PX),
        showscale=False,
        xgap=2,
        ygap=2,
        hoverinfo="skip",
    )
    # column names sit on top: room for them under the title, which they touched with the default margin
    layout = dict(
        title=dict(text=title, x=0.0, xanchor="left"),
        font=FONT,
        height=110 + 42 * rows,
        margin=dict(l=10, r=10, t=80 if title else 40, b=10),
        plot_bgcolor=MASKED_BG,
        xaxis=dict(title=dict(text=""), automargin=True, side="top"),
        yaxis=dict(title=dict(text=""), automargin=True, autorange="reversed"),
    )
    return figure([heatmap], layout)


def scaling_chart(rows: Sequence[dict], n_keys: int = 10) -> go.Figure:
    """Why ÷√d_k, in two panels over ``d_k`` on log axes (rows from ``teaching.worked.scaling_demo``): the spread
    of the scores (std of q·k = √d_k, of q·k/√d_k = 1) and the mean largest of ``n_keys`` softmax weights, which
    climbs towards 1 (one key takes everything) without the scaling and stays put with it."""
    d = [r["d_k"] for r in rows]
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=("Spread of the scores (std)", f"Largest of {n_keys} softmax weights (mean)"),
    )
    series = (("q·k", BLUE, "score_std", "max_raw"), ("q·k / √d_k", ACCENT, None, "max_scaled"))
    for name, colour, std_key, max_key in series:
        std = [r[std_key] for r in rows] if std_key else [1.0] * len(rows)
        line = dict(color=colour, width=2.5)
        fig.add_trace(
            go.Scatter(
                x=d,
                y=std,
                mode="lines+markers",
                name=name,
                line=line,
                legendgroup=name,
                hovertemplate=f"{name}<br>d_k %{{x}}<br>std %{{y:.3g}}<extra></extra>",
            ),
            1,
            1,
        )
        fig.add_trace(
            go.Scatter(
                x=d,
                y=[r[max_key] for r in rows],
                mode="lines+markers",
                name=name,
                line=line,
                legendgroup=name,
                showlegend=False,
                hovertemplate=f"{name}<br>d_k %{{x}}<br>max weight %{{y:.3f}}<extra></extra>",
            ),
            1,
            2,
        )
    fig.add_hline(
        y=1 / n_keys,
        line=dict(color=SUBTLE, dash="dot", width=1.5),
        row=1,
        col=2,
        annotation_text=f"uniform 1/{n_keys}",
        annotation_position="top right",
        annotation_font=dict(color=SUBTLE, size=13),
    )
    fig = _layout(fig, "", 380)
    ticks = [v for v in d if v in (1, 4, 16, 64, 256, 1024)] or d
    fig.update_xaxes(
        type="log", tickvals=ticks, ticktext=[str(v) for v in ticks], title_text="d_k (log scale)", gridcolor=GRID
    )
    top = max(max(r["score_std"] for r in rows), 1.0)
    std_ticks = [2.0**i for i in range(int(np.log2(top)) + 1)]  # 1, 2, 4, …: no crowd of minor labels
    fig.update_yaxes(
        type="log",
        title_text="std (log scale)",
        gridcolor=GRID,
        tickvals=std_ticks,
        ticktext=[f"{v:g}" for v in std_ticks],
        range=[np.log10(0.8), np.log10(top * 1.25)],
        row=1,
        col=1,
    )
    fig.update_yaxes(range=[0, 1.02], title_text="max weight", gridcolor=GRID, row=1, col=2)
    fig.update_layout(legend=legend_above(1.12), margin=dict(t=80))
    return fig


# --- tokenization -------------------------------------------------------------------------------------
def _chip(top: str, bottom: str, bg: str, border: str = CHIP_BORDER, dashed: bool = False) -> str:
    style = (
        f"display:inline-block;margin:2px 3px;padding:3px 6px;border-radius:5px;background:{bg};"
        f"border:1px {'dashed' if dashed else 'solid'} {border};text-align:center;vertical-align:top"
    )
    return (
        f'<span style="{style}"><span style="font-family:monospace;font-size:1.15rem;white-space:pre">{top}</span>'
        f'<br><span style="font-size:0.75rem;color:{MUTED};font-family:monospace">{bottom}</span></span>'
    )


def token_spans_html(
    text: str, tokens: Sequence[str], ids: Sequence[int], offsets: Sequence[tuple[int, int]], unk: str = "<unk>"
) -> str:
    """The text split into its tokens' character spans, alternately coloured, piece and id under each.

    A space inside a span shows as ``␣``; a token with an empty span (a lone ``▁`` word-start marker) is drawn
    dashed with "∅"; ``<unk>`` pieces are red and show the characters they replaced. Safe HTML (escaped).
    """
    chips = []
    for n, (piece, tid, (s, e)) in enumerate(zip(tokens, ids, offsets, strict=True)):
        chars = text[s:e]
        bottom = f"{escape_html(piece)} · {int(tid)}"
        if piece == unk:
            chips.append(_chip(escape_html(chars.replace(" ", "␣")) or "∅", bottom, ERROR_BG, ERROR_BORDER))
        elif s == e:
            chips.append(_chip("∅", bottom + " · empty span", EMPTY_BG, dashed=True))
        else:
            chips.append(_chip(escape_html(chars.replace(" ", "␣")), bottom, CHIP_COLOURS[n % 2]))
    return '<div style="line-height:2.6">' + "".join(chips) + "</div>"


#: Markdown's punctuation as character references: Markdown shows a reference as its character and never reads it
#: as syntax, so a piece like ``**`` or ``](`` shows as itself, and ``|`` does not end the cell.
_MARKDOWN_REFS = str.maketrans({c: f"&#{ord(c)};" for c in "\\`*_[]()|~!"})


def cell_html(text: str) -> str:
    """Escaped for HTML and safe inside a Markdown table cell: no emphasis, code, link or cell end of its own."""
    return escape_html(text).translate(_MARKDOWN_REFS)


def pieces_html(pieces: Sequence[str], highlight: Sequence[bool] | None = None) -> str:
    """Pieces as chips (``▁`` kept visible); chips with ``highlight[i]`` are outlined (e.g. just merged)."""
    out = []
    for i, p in enumerate(pieces):
        on = bool(highlight[i]) if highlight is not None else False
        out.append(
            f'<span style="display:inline-block;margin:1px 2px;padding:1px 6px;border-radius:4px;'
            f"font-family:monospace;font-size:1.05rem;background:{HIGHLIGHT_BG if on else CELL_BG};"
            f'border:{f"2px solid {ACCENT}" if on else f"1px solid {CELL_BORDER}"}">{cell_html(p)}</span>'
        )
    return "".join(out)
