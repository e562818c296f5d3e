"""Inside one head, for one query: the query·key figures of the Attention page's "Query · key" tab.

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
from plotly.colors import diverging, make_colorscale, sample_colorscale

from viz.attention import _short, display_token, label_px, plotly_escape, token_yaxis
from viz.theme import (
    AXIS_TITLE_FONT,
    BLUE,
    ENLARGED,
    FONT,
    GRID,
    INK,
    LINE_EM,
    MASKED_BG,
    MIN_READABLE,
    MONO_CHAR_EM,
    NARROW_PX,
    PAGE_PX,
    SUBTLE,
    TITLE_STANDOFF,
    WHITE,
    ZERO_LINE,
    figure,
    title_chars,
    title_margin,
    wrap_title,
)
from viz.theme import title as _title

#: The diverging scale of every signed value here: ColorBrewer's RdBu from blue (negative) to red (positive), as
#: stops: the name "RdBu" means another scale in plotly.js (blue, grey, red), which draws a figure built without
#: Plotly's validation (:func:`viz.theme.figure`), and the one Python names in a validated one.
DIVERGING = dict(colorscale=make_colorscale(diverging.RdBu_r))
#: Bar colours of a negative and a positive score, from near the ends of :data:`DIVERGING`.
NEGATIVE, POSITIVE = sample_colorscale(DIVERGING["colorscale"], [0.1, 0.9])
#: Power-of-two steps between labelled dimensions (every dimension is hovered; these are written).
_DIM_STEPS = (1, 2, 4, 8, 16, 32, 64)
#: Room (px) under a figure's plot for its x tick labels and x-axis title, as presentation mode enlarges them.
_UNDER_PX = 84
#: Room (px) a horizontal colour bar or legend takes under that.
_BAR_PX = 64


def _arr(values, ndim: int, what: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim != ndim:
        raise ValueError(f"{what} must have {ndim} dimension(s), got shape {a.shape}")
    return a


def dimension_order(contributions, mask=None, sort: bool = True) -> np.ndarray:
    """The order the ``d_k`` dimensions are drawn in: as in the head (``sort=False``), or by their mean
    ``|contribution|`` over the keys the query may see, largest first (``contributions``: ``[keys, d_k]``,
    ``mask``: bool ``[keys]``, ``True`` = seen; ties keep the head's order). Returns ``[d_k]`` dimension indices."""
    c = _arr(contributions, 2, "contributions")
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


def _bound(*arrays) -> float:
    finite = [np.abs(a[np.isfinite(a)]).max() for a in arrays if np.isfinite(a).any()]
    return float(max(finite)) if finite and max(finite) > 0 else 1.0


def _colour(bound: float, title: str, show: bool = True, side: str = "right") -> dict:
    """A heatmap's diverging colours from ``-bound`` to ``bound``, and its colour bar (``show``) with 14 px numbers:
    on the trace, not a shared colour axis, so that presentation mode enlarges them as every trace's."""
    return dict(zmin=-bound, zmax=bound, zmid=0.0, **DIVERGING, showscale=show, colorbar=dict(
        title=dict(text=title, side=side, font=AXIS_TITLE_FONT), thickness=12, tickfont=dict(size=MIN_READABLE)))


def _dim_ticks(order: np.ndarray, plot_px: float) -> dict:
    """An x axis over the drawn dimensions that writes every 1st, 2nd, 4th… one's index (as in the head), as far
    apart as labels drawn as large as presentation mode may draw them need."""
    n = len(order)
    need = max(2, len(str(n - 1))) * MONO_CHAR_EM * MIN_READABLE * ENLARGED + 10
    every = next((s for s in _DIM_STEPS if s * plot_px / max(n, 1) >= need), n)
    kept = list(range(0, n, every))
    return dict(tickvals=kept, ticktext=[str(int(order[i])) for i in kept], tickangle=0, showgrid=False,
                zeroline=False, automargin=True, range=[-0.5, n - 0.5])


def _row_px(n_rows: int) -> int:
    """A row per key: a line of 14 px labels as presentation mode enlarges them, more for a short sentence."""
    return int(max(30 if n_rows <= 16 else 24, LINE_EM * MIN_READABLE * 1.25 + 2))


def _layout(title: str, width: int, plot_rows_px: float, bottom: int) -> dict:
    """The layout every figure here starts from: its title, fonts, and a height that gives the plot
    ``plot_rows_px`` px between the title (with the panels' own titles under it) and ``bottom`` px of room."""
    text = wrap_title(title, title_chars(width)) if title else ""
    top = title_margin(text, 30, 24) + 26
    return dict(title=_title(text), font=FONT, height=int(top + plot_rows_px + bottom),
                margin=dict(l=10, r=10, t=top, b=bottom), plot_bgcolor=WHITE)


def _domains(weights: Sequence[float], spacing: float) -> list[list[float]]:
    """Paper-coordinate ``[start, end]`` of panels side by side (or stacked), in proportion to ``weights``, with
    ``spacing`` between neighbours (as ``plotly.subplots.make_subplots`` lays them out)."""
    share = (1.0 - spacing * (len(weights) - 1)) / sum(weights)
    domains, at = [], 0.0
    for w in weights:
        domains.append([at, at + w * share])
        at += w * share + spacing
    domains[-1][1] = 1.0
    return domains


def _panel_title(text: str, domain: Sequence[float], y: float = 1.0) -> dict:
    """A panel's title above it (what ``make_subplots``' subplot titles are): 16 px, centred on its x ``domain``."""
    return dict(text=text, x=(domain[0] + domain[1]) / 2, y=y, xref="paper", yref="paper", xanchor="center",
                yanchor="bottom", showarrow=False, font=dict(size=16))


def _axis_title(text: str) -> dict:
    return dict(text=text, font=AXIS_TITLE_FONT, standoff=TITLE_STANDOFF)


def _key_labels(key_labels: Sequence[str], own: int | None) -> list[str]:
    shown = [plotly_escape(_short(display_token(t))) for t in key_labels]
    if own is not None and 0 <= own < len(shown):
        shown[own] = f"<b>{shown[own]}</b>"  # the query's own position (self-attention)
    return shown


def _plot_px(width: int, labels: Sequence[str]) -> float:
    """The plot area's width in a figure ``width`` px wide, less the key labels at its left and a colour bar."""
    return max(width - 20 - label_px([_short(display_token(t)) for t in labels], MIN_READABLE) * ENLARGED
               - 40 - 90, 100.0)


def score_figure(contributions, scores, weights, key_labels: Sequence[str], *, mask=None, bias=None,
                 unrotated=None, order=None, own: int | None = None, title: str = "", width: int = PAGE_PX
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
    c = _arr(contributions, 2, "contributions")
    n, d_k = c.shape
    s, w = _arr(scores, 1, "scores"), _arr(weights, 1, "weights")
    seen = np.ones(n, bool) if mask is None else np.asarray(mask, bool).reshape(-1)
    order = np.arange(d_k) if order is None else np.asarray(order, int)
    if len(s) != n or len(w) != n or len(seen) != n or len(key_labels) != n or sorted(order) != list(range(d_k)):
        raise ValueError(f"scores, weights, mask and labels need one entry per key ({n}), order every dimension")
    rows = list(range(n))
    labels = _key_labels(key_labels, own)
    z = np.where(seen[:, None], c[:, order], np.nan)
    hover = [[f"key <b>{labels[j]}</b> · dimension {int(order[i])}" for i in range(d_k)] for j in rows]
    shown_s = np.where(seen, s, 0.0)
    data = [
        dict(type="heatmap", z=z, x=list(range(d_k)), y=rows, **_colour(_bound(z), "q_d·k_d/√d_k", side="top"),
             customdata=hover, xgap=0.5, ygap=1,
             hovertemplate="%{customdata}<br>q_d·k_d/√d_k %{z:+.4f}<extra></extra>"),
        dict(type="bar", x=shown_s, y=rows, xaxis="x2", yaxis="y2", orientation="h",
             marker=dict(color=[POSITIVE if v >= 0 else NEGATIVE for v in shown_s]),
             text=[f"{v:+.2f}" if m else "" for v, m in zip(s, seen, strict=True)], textposition="outside",
             cliponaxis=False,
             customdata=labels, hovertemplate="%{customdata}: score %{x:+.4f}<extra></extra>", showlegend=False,
             name="score"),
    ]
    extremes = [shown_s]
    if bias is not None:
        b = _arr(bias, 1, "bias")
        logit = np.where(seen, s + b, np.nan)
        extremes.append(logit)
        data.append(dict(type="scatter", x=logit, y=rows, xaxis="x2", yaxis="y2", mode="markers",
                         marker=dict(symbol="diamond", size=11, color=INK), name="+ ALiBi bias = logit",
                         customdata=np.stack([b, np.nan_to_num(logit)], -1),
                         hovertemplate="bias %{customdata[0]:+.4f}<br>logit %{customdata[1]:+.4f}<extra></extra>"))
    if unrotated is not None:
        u = np.where(seen, _arr(unrotated, 1, "unrotated"), np.nan)
        extremes.append(u)
        data.append(dict(type="scatter", x=u, y=rows, xaxis="x2", yaxis="y2", mode="markers",
                         name="without RoPE's rotation", hovertemplate="without rotation %{x:+.4f}<extra></extra>",
                         marker=dict(symbol="circle-open", size=11, color=SUBTLE, line=dict(width=2))))
    lo = min([0.0] + [float(np.nanmin(e)) for e in extremes if np.isfinite(e).any()])
    hi = max([0.0] + [float(np.nanmax(e)) for e in extremes if np.isfinite(e).any()])
    pad = (0.8 if width < NARROW_PX else 0.45) * (hi - lo or 1.0)  # room for the numbers beside the bars
    left = lo - (pad if lo < 0 else 0.05 * pad)
    masked = [j for j in rows if not seen[j]]
    if masked:  # written from the panel's left edge: from 0 it ran out of the panel
        data.append(dict(type="scatter", x=[left] * len(masked), y=masked, xaxis="x2", yaxis="y2", mode="text",
                         text=["masked (−∞)"] * len(masked), textposition="middle right", cliponaxis=False,
                         textfont=dict(size=MIN_READABLE, color=SUBTLE), hoverinfo="skip", showlegend=False,
                         name="masked"))
    data.append(dict(type="bar", x=w, y=rows, xaxis="x3", yaxis="y3", orientation="h", marker=dict(color=BLUE),
                     text=[f"{v:.2f}" if v >= 0.005 else "" for v in w], textposition="outside", cliponaxis=False,
                     customdata=labels, showlegend=False, name="weight",
                     hovertemplate="%{customdata}: weight %{x:.4f}<extra></extra>"))
    row = _row_px(n)
    plot_h = row * n
    # A phone's width (under NARROW_PX) gives the bars more of it and the panels shorter titles: laid out as on a
    # projector, the bars' numbers, ticks and titles were written over each other
    narrow = width < NARROW_PX
    shares = (0.36, 0.36, 0.28) if narrow else (0.6, 0.22, 0.18)
    domains = _domains(shares, 0.09 if narrow else 0.035)
    layout = _layout(title, width, plot_h, _UNDER_PX + _BAR_PX)
    key_axis = dict(autorange="reversed", showgrid=False, zeroline=False)
    plot_px = _plot_px(width, key_labels) * shares[0]
    sorted_note = " (sorted by mean |part|)" if list(order) != list(range(d_k)) else ""
    layout.update(
        bargap=0.25,
        xaxis=dict(_dim_ticks(order, plot_px), domain=domains[0], anchor="y",
                   title=_axis_title("dimension d" + sorted_note)),
        xaxis2=dict(domain=domains[1], anchor="y2", range=[left, hi + pad], gridcolor=GRID, zeroline=True,
                    zerolinecolor=ZERO_LINE, **(dict(nticks=3) if narrow else {})),
        xaxis3=dict(domain=domains[2], anchor="y3", range=[0, 1.7 if narrow else 1.3],
                    tickvals=[0, 1] if narrow else [0, 0.5, 1], gridcolor=GRID),
        yaxis=dict(token_yaxis(labels, MIN_READABLE, "keys"), **key_axis, anchor="x"),
        yaxis2=dict(key_axis, anchor="x2", matches="y", showticklabels=False),
        yaxis3=dict(key_axis, anchor="x3", matches="y", showticklabels=False),
        annotations=[_panel_title(t, d) for t, d in zip(
            ("part per dimension", "score", "weight") if narrow
            else ("each dimension's part of the score", "score q·k/√d_k", "weight"), domains, strict=True)],
        legend=dict(orientation="h", x=domains[1][0], xanchor="left", y=-_UNDER_PX / plot_h, yanchor="top",
                    font=dict(size=MIN_READABLE)),
        # the masked keys' rows greyed across every panel (the mask, not a value of 0), one band per run of them
        shapes=[dict(type="rect", xref=f"x{col if col > 1 else ''} domain", yref="y", x0=0, x1=1, y0=start - 0.5,
                     y1=end + 0.5, fillcolor=MASKED_BG, line=dict(width=0), layer="below")
                for start, end in _runs(masked) for col in (1, 2, 3)])
    data[0]["colorbar"].update(orientation="h", x=sum(domains[0]) / 2, xanchor="center",
                               len=domains[0][1] - domains[0][0], y=-_UNDER_PX / plot_h, yanchor="top")
    return figure(data, layout)


def _stacked(panels: Sequence[tuple[str, np.ndarray, np.ndarray]], first: Sequence[str], rest: Sequence[str],
             order: np.ndarray, hover: str, title: str, colour_title: str, width: int) -> go.Figure:
    """Panels side by side, each a one-row heatmap (``first``) over a heatmap of one row per ``rest`` label, on one
    diverging colour scale, the columns in ``order``. Axes are numbered as ``make_subplots`` numbers them: the top
    row's panels first (``x``/``y``, ``x2``/``y2``, …), then the bottom row's."""
    n, cols = len(rest), len(panels)
    dims = list(range(len(order)))
    bound = _bound(*[a for _, t, b in panels for a in (t, b)])
    x_domains = _domains([1] * cols, 0.04)
    bottom_dom, top_dom = _domains([n, 1], 0.5 / (n + 1) if n else 0.1)  # from the bottom up
    plot_px = _plot_px(width, list(first) + list(rest)) / cols
    row = _row_px(n + 1)
    layout = _layout(title, width, row * (n + 1.5), _UNDER_PX)
    data, notes = [], []
    for col, (name, top, body) in enumerate(panels):
        notes.append(_panel_title(name, x_domains[col]))
        rows = ((top[None, order], first, top_dom), (body[:, order], rest, bottom_dom))
        for r, (z, labels, y_dom) in enumerate(rows):
            i = r * cols + col + 1
            ax = "" if i == 1 else str(i)
            text = [[f"<b>{labels[k]}</b> · dimension {int(order[d])}" for d in dims] for k in range(len(labels))]
            data.append(dict(type="heatmap", z=z, x=dims, y=list(range(len(labels))), xaxis=f"x{ax}",
                             yaxis=f"y{ax}", **_colour(bound, colour_title, show=i == 1), xgap=0.5, ygap=1,
                             customdata=text, hovertemplate="%{customdata}<br>" + hover + " %{z:+.4f}<extra></extra>"))
            base = str(cols + col + 1)  # the panel's bottom axis, which writes the dimensions
            x_axis = dict(_dim_ticks(order, plot_px), title=_axis_title("dimension d")) if r else \
                dict(matches=f"x{base}", ticks="", showticklabels=False, showgrid=False, zeroline=False)
            y_axis = dict(token_yaxis(labels, MIN_READABLE), autorange="reversed")
            if col:  # one column of labels, at the left
                y_axis.update(matches=f"y{r * cols + 1 if r else ''}", showticklabels=False)
            layout[f"xaxis{ax}"] = dict(x_axis, domain=x_domains[col], anchor=f"y{ax}")
            layout[f"yaxis{ax}"] = dict(y_axis, domain=y_dom, anchor=f"x{ax}")
    layout["annotations"] = notes
    return figure(data, layout)


def vectors_figure(panels: Sequence[tuple[str, object, object]], query_label: str, key_labels: Sequence[str],
                   order=None, title: str = "", width: int = PAGE_PX) -> go.Figure:
    """The query vector over every key vector, entry by entry, in one or more panels side by side (RoPE: before
    and after the rotation).

    Args:
        panels: ``(name, q [d_k], k [keys, d_k])`` per panel, drawn on one colour scale.
        query_label: the query's piece; key_labels: one piece per key.
        order: the dimensions' drawing order (:func:`dimension_order`; default as in the head).

    Raises:
        ValueError: shapes that do not agree, or no panel.
    """
    if not panels:
        raise ValueError("at least one panel is needed")
    arrays = [(name, _arr(q, 1, "q"), _arr(k, 2, "k")) for name, q, k in panels]
    d_k = len(arrays[0][1])
    if any(len(q) != d_k or k.shape != (len(key_labels), d_k) for _, q, k in arrays):
        raise ValueError(f"every panel needs q [{d_k}] and k [{len(key_labels)}, {d_k}]")
    order = np.arange(d_k) if order is None else np.asarray(order, int)
    first = [f"q · {plotly_escape(_short(display_token(query_label)))}"]
    return _stacked(arrays, first, _key_labels(key_labels, None), order, "value", title, "value", width)


def values_figure(weighted, output, key_labels: Sequence[str], title: str = "", width: int = PAGE_PX) -> go.Figure:
    """What the head reads: each value vector scaled by its weight (a row per key, ``w_j · v_j``) above their sum,
    the head's output before W^O (the top panel's one row). Dimensions as in the head.

    Args:
        weighted: ``[keys, d_k]``; output: ``[d_k]`` (the sum of ``weighted``'s rows); key_labels: one per key.

    Raises:
        ValueError: shapes that do not agree.
    """
    wv, out = _arr(weighted, 2, "weighted"), _arr(output, 1, "output")
    if wv.shape != (len(key_labels), len(out)):
        raise ValueError(f"weighted must be [{len(key_labels)}, {len(out)}] to go with the output and labels")
    order = np.arange(len(out))
    return _stacked([("output = Σ_j w_j · v_j (above) and each w_j · v_j", out, wv)], ["output"],
                    _key_labels(key_labels, None), order, "value", title, "value", width)


def top_dimensions(contributions_row, k: int = 3) -> list[tuple[int, float]]:
    """The ``k`` dimensions whose part of one key's score (``[d_k]``) is largest in size: ``[(d, part), …]``."""
    row = _arr(contributions_row, 1, "contributions_row")
    best = np.argsort(-np.abs(row), kind="stable")[:k]
    return [(int(d), float(row[d])) for d in best if math.isfinite(row[d])]
