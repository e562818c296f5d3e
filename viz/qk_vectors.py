"""Inside one head, for one query: the vectors behind the score and what the head reads, entry by entry.

:func:`vectors_figure`: the query vector over every key vector (before and after RoPE's rotation);
:func:`values_figure`: each value vector scaled by its weight, above their sum. Pure functions from arrays and token
labels to Plotly figures on the diverging scale of :mod:`viz.qk_panels`; no Streamlit, no torch, no model.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.qk_panels import (
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
    MIN_READABLE,
    PAGE_PX,
    figure,
)
from viz.token_labels import display_token, plotly_escape, shorten, token_yaxis


def _stacked(
    panels: Sequence[tuple[str, np.ndarray, np.ndarray]],
    first: Sequence[str],
    rest: Sequence[str],
    order: np.ndarray,
    hover: str,
    title: str,
    colour_title: str,
    width: int,
) -> go.Figure:
    """Panels side by side, each a one-row heatmap (``first``) over a heatmap of one row per ``rest`` label, on one
    diverging colour scale, the columns in ``order``. Axes are numbered as ``make_subplots`` numbers them: the top
    row's panels first (``x``/``y``, ``x2``/``y2``, …), then the bottom row's."""
    n, cols = len(rest), len(panels)
    dims = list(range(len(order)))
    bound = signed_bound(*[a for _, t, b in panels for a in (t, b)])
    x_domains = panel_domains([1] * cols, 0.04)
    bottom_dom, top_dom = panel_domains([n, 1], 0.5 / (n + 1) if n else 0.1)  # from the bottom up
    plot_px = dimensions_px(width, list(first) + list(rest)) / cols
    row = key_row_px(n + 1)
    layout = base_layout(title, width, row * (n + 1.5), UNDER_PX)
    data, notes = [], []
    for col, (name, top, body) in enumerate(panels):
        notes.append(panel_title(name, x_domains[col]))
        rows = ((top[None, order], first, top_dom), (body[:, order], rest, bottom_dom))
        for r, (z, labels, y_dom) in enumerate(rows):
            i = r * cols + col + 1
            ax = "" if i == 1 else str(i)
            text = [[f"<b>{labels[k]}</b> · dimension {int(order[d])}" for d in dims] for k in range(len(labels))]
            data.append(
                dict(
                    type="heatmap",
                    z=z,
                    x=dims,
                    y=list(range(len(labels))),
                    xaxis=f"x{ax}",
                    yaxis=f"y{ax}",
                    **signed_colours(bound, colour_title, show=i == 1),
                    xgap=0.5,
                    ygap=1,
                    customdata=text,
                    hovertemplate="%{customdata}<br>" + hover + " %{z:+.4f}<extra></extra>",
                )
            )
            base = str(cols + col + 1)  # the panel's bottom axis, which writes the dimensions
            x_axis = (
                dict(dimension_axis(order, plot_px), title=axis_title("dimension d"))
                if r
                else dict(matches=f"x{base}", ticks="", showticklabels=False, showgrid=False, zeroline=False)
            )
            y_axis = dict(token_yaxis(labels, MIN_READABLE), autorange="reversed")
            if col:  # one column of labels, at the left
                y_axis.update(matches=f"y{r * cols + 1 if r else ''}", showticklabels=False)
            layout[f"xaxis{ax}"] = dict(x_axis, domain=x_domains[col], anchor=f"y{ax}")
            layout[f"yaxis{ax}"] = dict(y_axis, domain=y_dom, anchor=f"x{ax}")
    layout["annotations"] = notes
    return figure(data, layout)


def vectors_figure(
    panels: Sequence[tuple[str, object, object]],
    query_label: str,
    key_labels: Sequence[str],
    order=None,
    title: str = "",
    width: int = PAGE_PX,
) -> go.Figure:
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
    arrays = [(name, checked(q, 1, "q"), checked(k, 2, "k")) for name, q, k in panels]
    d_k = len(arrays[0][1])
    if any(len(q) != d_k or k.shape != (len(key_labels), d_k) for _, q, k in arrays):
        raise ValueError(f"every panel needs q [{d_k}] and k [{len(key_labels)}, {d_k}]")
    order = np.arange(d_k) if order is None else np.asarray(order, int)
    first = [f"q · {plotly_escape(shorten(display_token(query_label)))}"]
    return _stacked(arrays, first, shown_keys(key_labels, None), order, "value", title, "value", width)


def values_figure(weighted, output, key_labels: Sequence[str], title: str = "", width: int = PAGE_PX) -> go.Figure:
    """What the head reads: each value vector scaled by its weight (a row per key, ``w_j · v_j``) above their sum,
    the head's output before W^O (the top panel's one row). Dimensions as in the head.

    Args:
        weighted: ``[keys, d_k]``; output: ``[d_k]`` (the sum of ``weighted``'s rows); key_labels: one per key.

    Raises:
        ValueError: shapes that do not agree.
    """
    wv, out = checked(weighted, 2, "weighted"), checked(output, 1, "output")
    if wv.shape != (len(key_labels), len(out)):
        raise ValueError(f"weighted must be [{len(key_labels)}, {len(out)}] to go with the output and labels")
    order = np.arange(len(out))
    return _stacked(
        [("output = Σ_j w_j · v_j (above) and each w_j · v_j", out, wv)],
        ["output"],
        shown_keys(key_labels, None),
        order,
        "value",
        title,
        "value",
        width,
    )
