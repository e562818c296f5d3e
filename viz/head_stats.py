"""One number per head, and what removing heads does: a layers × heads heatmap of a head statistic, the ablation
sweep's maps on one shared colour range, and a translation's per-token log-probabilities with and without the
ablated heads.

Pure functions from arrays (tensors or numpy) to Plotly figures; no Streamlit, no model. Pieces are shown with
:func:`viz.token_labels.display_token`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from viz import theme
from viz.attention import as_array
from viz.theme import ACCENT as HIGHLIGHT
from viz.theme import ATTENTION_SCALE, FONT, GRID, MIN_READABLE, MONO, PALE_BLUE, WHITE, ZERO_LINE
from viz.theme import INK as TEXT_COLOR
from viz.token_labels import display_token, plotly_escape, shorten


def cell_number(value: float, decimals: int = 2) -> str:
    """``value`` in at most ``decimals + 3`` characters, to fit a heatmap cell: fewer decimals as it grows
    (``0.034`` → ``"0.03"``, ``-12.345`` → ``"-12.3"``, ``1234.5`` → ``"1234"``); NaN → ``""``."""
    if not np.isfinite(value):
        return ""
    size = abs(float(value))
    places = decimals if size < 10 else max(0, decimals - 1) if size < 100 else 0
    return f"{value:.{places}f}"


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
            removing the head hurts, blue = removing it helps), symmetric around 0: from ``-zmax`` to ``zmax``
            (default: the largest absolute value; ``zmin`` is not used).
        zmin / zmax: colour range for a sequential scale (default: the data's range, 0 at least for ``zmin``).

    Returns:
        A Plotly figure with one ``[layers, heads]`` heatmap; rows ``layer 1…``, columns ``head 1…``.
    """
    v = as_array(values)
    if v.ndim != 2:
        raise ValueError(f"one value per head [layers, heads] is needed, got {v.shape}")
    n_rows, n_cols = v.shape
    finite = v[np.isfinite(v)]
    if diverging:
        bound = abs(float(zmax)) if zmax is not None else float(np.abs(finite).max()) if finite.size else 1.0
        bound = bound or 1.0
        scale = dict(colorscale="RdBu", reversescale=True, zmid=0.0, zmin=-bound, zmax=bound)
    else:
        lo = zmin if zmin is not None else min(0.0, float(finite.min()) if finite.size else 0.0)
        hi = zmax if zmax is not None else (float(finite.max()) if finite.size else 1.0)
        scale = dict(colorscale=ATTENTION_SCALE, zmin=lo, zmax=hi if hi > lo else lo + 1.0)
    fig = go.Figure(
        go.Heatmap(
            z=v,
            x=[f"head {j + 1}" for j in range(n_cols)],
            y=[f"{row_label} {i + 1}" for i in range(n_rows)],
            text=[[cell_number(x, decimals) for x in row] for row in v],
            texttemplate="%{text}",
            textfont=dict(size=MIN_READABLE),
            hovertemplate="%{y} · %{x}<br>" + plotly_escape(name) + " %{z:.3f}<extra></extra>",
            xgap=2,
            ygap=2,
            colorbar=dict(title=dict(text=name), thickness=14),
            **scale,
        )
    )
    fig.update_layout(
        title=theme.title(title if title is not None else name),
        font=FONT,
        height=140 + 56 * n_rows,
        margin=dict(l=10, r=10, t=50, b=10),
        plot_bgcolor=WHITE,
    )
    fig.update_yaxes(autorange="reversed", automargin=True)
    # head names under the cells: above them, they ran into the title
    fig.update_xaxes(side="bottom", automargin=True)
    return fig


def sweep_heatmaps(
    drops: Mapping[str, object], titles: Mapping[str, str] | None = None, name: str = "drop (nats)"
) -> list[go.Figure]:
    """The ablation sweep: per attention kind, the drop in the output's log-probability when each head alone is
    removed, as a layers × heads heatmap (:func:`head_stat_heatmap`, diverging).

    Every map shares one colour range, ±(the largest absolute drop of any kind): the maps are read side by side,
    and a colour means the same drop in each (with a range per map, a head that barely mattered looked as red as
    the one that mattered most).

    Args:
        drops: kind → ``[layers, heads]`` drops (nats); titles: kind → chart title (default: the kind).
    """
    arrays = {kind: as_array(d) for kind, d in drops.items()}
    finite = [np.abs(a[np.isfinite(a)]).max() for a in arrays.values() if np.isfinite(a).any()]
    bound = float(max(finite)) if finite else 1.0
    return [
        head_stat_heatmap(a, name, diverging=True, zmax=bound or 1.0, title=(titles or {}).get(kind, kind))
        for kind, a in arrays.items()
    ]


def log_prob_figure(labels: Sequence[str], base, ablated=None, title: str = "") -> go.Figure:
    """Per-token log-probabilities of a translation, with and without ablated heads, as grouped bars.

    Args:
        labels: the ``n`` scored pieces ``y₁ … yₙ``.
        base: ``[n]`` log-probabilities with every head; ablated: ``[n]`` with the heads removed, or ``None``.
    """
    b = as_array(base).reshape(-1)
    if len(b) != len(labels):
        raise ValueError("one log-probability per token is needed")
    disp = [display_token(t) for t in labels]
    x = list(range(len(b)))
    fig = go.Figure(
        go.Bar(
            x=x,
            y=b,
            name="all heads",
            marker_color=PALE_BLUE,
            customdata=disp,
            hovertemplate="%{customdata}<br>all heads: %{y:.3f}<extra></extra>",
        )
    )
    if ablated is not None:
        a = as_array(ablated).reshape(-1)
        if len(a) != len(b):
            raise ValueError("base and ablated need the same length")
        fig.add_trace(
            go.Bar(
                x=x,
                y=a,
                name="heads removed",
                marker_color=HIGHLIGHT,
                customdata=disp,
                hovertemplate="%{customdata}<br>heads removed: %{y:.3f}<extra></extra>",
            )
        )
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=15, color=TEXT_COLOR)),
        font=FONT,
        barmode="group",
        height=360,
        margin=dict(l=10, r=10, t=50 if title else 20, b=10),
        plot_bgcolor=WHITE,
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
    )
    fig.update_xaxes(
        tickvals=x,
        ticktext=[shorten(t) for t in disp],
        tickangle=-45,
        automargin=True,
        tickfont=dict(family=MONO, size=MIN_READABLE if len(b) <= 24 else 11),
        title_text="translation tokens",
    )
    fig.update_yaxes(title_text="log-probability (nats)", gridcolor=GRID, zerolinecolor=ZERO_LINE, automargin=True)
    return fig
