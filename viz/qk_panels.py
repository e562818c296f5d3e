"""The look the query·key figures share (:mod:`viz.qk`, :mod:`viz.qk_vectors`): the diverging colour scale of
signed values and its colour bar, the axis over the ``d_k`` dimensions, the key rows and their labels, panels side by
side, and the layout they start from. Pure functions from arrays and labels to Plotly layout dicts; no Streamlit.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from plotly.colors import diverging, make_colorscale

from viz.theme import (
    AXIS_TITLE_FONT,
    ENLARGED,
    FONT,
    LINE_EM,
    MIN_READABLE,
    MONO_CHAR_EM,
    TITLE_STANDOFF,
    WHITE,
    title_chars,
    title_margin,
    wrap_title,
)
from viz.theme import title as _title
from viz.token_labels import display_token, label_px, plotly_escape, shorten

#: The diverging scale of every signed value here: ColorBrewer's RdBu from blue (negative) to red (positive), as
#: stops: the name "RdBu" means another scale in plotly.js (blue, grey, red), which draws a figure built without
#: Plotly's validation (:func:`viz.theme.figure`), and the one Python names in a validated one.
DIVERGING = dict(colorscale=make_colorscale(diverging.RdBu_r))
#: Power-of-two steps between labelled dimensions (every dimension is hovered; these are written).
_DIM_STEPS = (1, 2, 4, 8, 16, 32, 64)
#: Room (px) under a figure's plot for its x tick labels and x-axis title, as presentation mode enlarges them.
UNDER_PX = 84
#: Room (px) a horizontal colour bar or legend takes under that.
BAR_PX = 64


def checked(values, ndim: int, what: str) -> np.ndarray:
    """``values`` as a float array; raises ``ValueError`` (naming it ``what``) unless it has ``ndim`` dimensions."""
    a = np.asarray(values, dtype=float)
    if a.ndim != ndim:
        raise ValueError(f"{what} must have {ndim} dimension(s), got shape {a.shape}")
    return a


def signed_bound(*arrays) -> float:
    """The largest finite ``|value|`` of ``arrays``, the end of a diverging scale centred at 0 (1.0 for none)."""
    finite = [np.abs(a[np.isfinite(a)]).max() for a in arrays if np.isfinite(a).any()]
    return float(max(finite)) if finite and max(finite) > 0 else 1.0


def signed_colours(bound: float, title: str, show: bool = True, side: str = "right") -> dict:
    """A heatmap's diverging colours from ``-bound`` to ``bound``, and its colour bar (``show``) with 14 px numbers:
    on the trace, not a shared colour axis, so that presentation mode enlarges them as every trace's."""
    return dict(
        zmin=-bound,
        zmax=bound,
        zmid=0.0,
        **DIVERGING,
        showscale=show,
        colorbar=dict(
            title=dict(text=title, side=side, font=AXIS_TITLE_FONT), thickness=12, tickfont=dict(size=MIN_READABLE)
        ),
    )


def dimension_axis(order: np.ndarray, plot_px: float) -> dict:
    """An x axis over the drawn dimensions that writes every 1st, 2nd, 4th… one's index (as in the head), as far
    apart as labels drawn as large as presentation mode may draw them need."""
    n = len(order)
    need = max(2, len(str(n - 1))) * MONO_CHAR_EM * MIN_READABLE * ENLARGED + 10
    every = next((s for s in _DIM_STEPS if s * plot_px / max(n, 1) >= need), n)
    kept = list(range(0, n, every))
    return dict(
        tickvals=kept,
        ticktext=[str(int(order[i])) for i in kept],
        tickangle=0,
        showgrid=False,
        zeroline=False,
        automargin=True,
        range=[-0.5, n - 0.5],
    )


def key_row_px(n_rows: int) -> int:
    """A row per key: a line of 14 px labels as presentation mode enlarges them, more for a short sentence."""
    return int(max(30 if n_rows <= 16 else 24, LINE_EM * MIN_READABLE * 1.25 + 2))


def base_layout(title: str, width: int, plot_rows_px: float, bottom: int) -> dict:
    """The layout every figure here starts from: its title, fonts, and a height that gives the plot
    ``plot_rows_px`` px between the title (with the panels' own titles under it) and ``bottom`` px of room."""
    text = wrap_title(title, title_chars(width)) if title else ""
    top = title_margin(text, 30, 24) + 26
    return dict(
        title=_title(text),
        font=FONT,
        height=int(top + plot_rows_px + bottom),
        margin=dict(l=10, r=10, t=top, b=bottom),
        plot_bgcolor=WHITE,
    )


def panel_domains(weights: Sequence[float], spacing: float) -> list[list[float]]:
    """Paper-coordinate ``[start, end]`` of panels side by side (or stacked), in proportion to ``weights``, with
    ``spacing`` between neighbours (as ``plotly.subplots.make_subplots`` lays them out)."""
    share = (1.0 - spacing * (len(weights) - 1)) / sum(weights)
    domains, at = [], 0.0
    for w in weights:
        domains.append([at, at + w * share])
        at += w * share + spacing
    domains[-1][1] = 1.0
    return domains


def panel_title(text: str, domain: Sequence[float], y: float = 1.0) -> dict:
    """A panel's title above it (what ``make_subplots``' subplot titles are): 16 px, centred on its x ``domain``."""
    return dict(
        text=text,
        x=(domain[0] + domain[1]) / 2,
        y=y,
        xref="paper",
        yref="paper",
        xanchor="center",
        yanchor="bottom",
        showarrow=False,
        font=dict(size=16),
    )


def axis_title(text: str) -> dict:
    """An axis title in the axis-title font, :data:`viz.theme.TITLE_STANDOFF` px from its tick labels."""
    return dict(text=text, font=AXIS_TITLE_FONT, standoff=TITLE_STANDOFF)


def shown_keys(key_labels: Sequence[str], own: int | None) -> list[str]:
    """The keys' tick labels, shown, shortened and escaped; the query's own position (``own``) in bold."""
    shown = [plotly_escape(shorten(display_token(t))) for t in key_labels]
    if own is not None and 0 <= own < len(shown):
        shown[own] = f"<b>{shown[own]}</b>"  # the query's own position (self-attention)
    return shown


def dimensions_px(width: int, labels: Sequence[str]) -> float:
    """The plot area's width in a figure ``width`` px wide, less the key labels at its left and a colour bar."""
    return max(
        width - 20 - label_px([shorten(display_token(t)) for t in labels], MIN_READABLE) * ENLARGED - 40 - 90, 100.0
    )
