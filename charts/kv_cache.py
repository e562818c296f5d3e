"""The decoder's KV cache as a figure: which K/V rows a step reuses and which it computes, per layer, and its size
in bytes (Vaswani et al. 2017 §3.2 for K and V; the cache itself is the standard incremental-decoding trick)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.theme import ACCENT, FONT, MIN_READABLE, TITLE_FONT, TOKEN_FONT, WHITE, thinned, tick_plan
from viz.theme import SKY as LIGHT
from viz.theme import STEEL as BLUE
from viz.token_labels import display_token, plotly_escape, shorten

#: Plot width (px) the KV-cache figure lays its labels out for: the page's width at 1280×720 with the sidebar open,
#: less the row labels. Presentation mode draws 1.25× larger fonts on a wider page (the sidebar collapsed), so the
#: same plan holds there.
KV_PLOT_PX = 740
#: Smallest share of the width either strip gets, so that its two-line title fits above it (fraction).
KV_MIN_STRIP = 0.4


def kv_tick_plan(labels: Sequence[str], strip_px: float) -> tuple[int, int]:
    """How the KV-cache figure writes ``labels`` (one per cell, :data:`viz.theme.TOKEN_FONT`) under a strip
    ``strip_px`` wide without overlaps: ``(angle, every)`` of :func:`viz.theme.tick_plan`, the one plan every token
    axis uses.

    Raises:
        ValueError: ``strip_px`` is not positive.
    """
    return tick_plan(labels, strip_px, TOKEN_FONT["size"])


def kv_cache_figure(
    n_layers: int,
    positions: int,
    new_rows: int = 1,
    src_len: int | None = None,
    target_tokens: Sequence[str] | None = None,
    source_tokens: Sequence[str] | None = None,
    cross_new: bool = False,
    title: str = "",
) -> go.Figure:
    """What the decoder's KV cache holds at one step.

    Left: per decoder layer, a strip of self-attention **K** and **V** rows, one per target position
    (``[2 · n_layers, positions]``): rows reused from the cache in blue, the ``new_rows`` rows computed at this
    step in the accent colour. Right (when ``src_len`` is given): the cross-attention K/V of the source
    (``[2 · n_layers, src_len]``), computed once from the encoder output at the first step (accent when
    ``cross_new``) and reused unchanged afterwards (light blue).

    Each cell stands for a ``[heads, d_k]`` block. ``z`` values: 1 = reused, 2 = new, 3 = cross (computed once).
    Every text is at least :data:`MIN_READABLE` px; token labels are turned upright and thinned (:func:`kv_tick_plan`)
    where they would run into each other at :data:`KV_PLOT_PX`.

    Args:
        target_tokens: labels of the ``positions`` decoder inputs (``<bos>`` + the tokens fed so far).
        source_tokens: labels of the ``src_len`` source pieces.
    """
    positions, new_rows = max(0, int(positions)), max(0, min(int(new_rows), int(positions)))
    ylabels = [f"layer {layer + 1} {kv}" for layer in range(n_layers) for kv in ("K", "V")]
    has_cross = bool(src_len)
    cols = 2 if has_cross else 1
    widths = [max(positions, 1), max(src_len or 0, 1)] if has_cross else [1]
    shares = [w / sum(widths) for w in widths]
    if has_cross:  # each strip wide enough for its title: the other gives way
        shares[0] = min(max(shares[0], KV_MIN_STRIP), 1 - KV_MIN_STRIP)
        shares[1] = 1 - shares[0]
    gap = 0.06
    fig = make_subplots(
        rows=1,
        cols=cols,
        shared_yaxes=True,
        horizontal_spacing=gap,
        column_widths=shares,
        subplot_titles=(
            ["self-attention K/V<br>(a column per target position)"]
            + (["cross-attention K/V<br>(computed once, from the encoder)"] if has_cross else [])
        ),
    )
    scale = [[0.0, BLUE], [0.33, BLUE], [0.33, ACCENT], [0.67, ACCENT], [0.67, LIGHT], [1.0, LIGHT]]

    def strip(n, value_of, labels, col, name):
        if n == 0:
            fig.add_annotation(
                text="empty: no step taken yet",
                showarrow=False,
                xref=f"x{col if col > 1 else ''} domain",
                yref="y domain",
                x=0.5,
                y=0.5,
            )
            fig.add_trace(go.Heatmap(z=[[None]] * len(ylabels), showscale=False, name=name), row=1, col=col)
            return
        z = np.array([[value_of(p) for p in range(n)] for _ in ylabels], dtype=float)
        lab = (
            [display_token(t) for t in labels]
            if labels is not None and len(labels) == n
            else [str(p) for p in range(n)]
        )
        what = {1: "reused from the cache", 2: "computed at this step", 3: "cross-attention, computed once"}
        hover = np.array(
            [
                [f"{yl}, position {p} ({plotly_escape(lab[p])}): {what[int(z[r, p])]}" for p in range(n)]
                for r, yl in enumerate(ylabels)
            ]
        )
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=list(range(n)),
                y=list(range(len(ylabels))),
                zmin=1,
                zmax=3,
                colorscale=scale,
                showscale=False,
                xgap=2,
                ygap=2,
                name=name,
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        ticks = [shorten(t, 8) for t in lab]
        angle, every = kv_tick_plan(ticks, KV_PLOT_PX * (1 - gap * (cols - 1)) * shares[col - 1])
        kept = thinned(n, every, keep_last=True)  # the newest position keeps its label
        fig.update_xaxes(
            tickvals=kept,
            ticktext=[ticks[p] for p in kept],
            tickangle=angle,
            tickfont=TOKEN_FONT,
            automargin=True,
            row=1,
            col=col,
        )

    strip(positions, lambda p: 2.0 if p >= positions - new_rows else 1.0, target_tokens, 1, "self-attention cache")
    if src_len:  # has_cross, spelled so that the type checker sees an int
        strip(int(src_len), lambda p: 2.0 if cross_new else 3.0, source_tokens, 2, "cross-attention cache")
    for name, color in (
        ("reused from the cache", BLUE),
        ("computed at this step", ACCENT),
        ("cross K/V, computed once", LIGHT),
    ):
        fig.add_trace(
            go.Scatter(
                x=[None], y=[None], mode="markers", name=name, marker=dict(size=12, color=color, symbol="square")
            ),
            row=1,
            col=1,
        )
    fig.update_yaxes(
        tickvals=list(range(len(ylabels))), ticktext=ylabels, autorange="reversed", automargin=True, row=1, col=1
    )
    fig.update_layout(
        # the title at the top of a margin that also holds the strips' two-line titles, at 1.25× in presentation
        title=dict(
            text=title, x=0.0, xanchor="left", yref="container", y=1.0, yanchor="top", pad=dict(t=8), font=TITLE_FONT
        ),
        font=FONT,
        plot_bgcolor=WHITE,
        height=230 + 30 * len(ylabels),
        margin=dict(l=10, r=10, t=120 if title else 70, b=80),
        legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom", x=0.0, font_size=MIN_READABLE),
        hoverlabel=dict(font_size=MIN_READABLE),
    )
    fig.update_annotations(font_size=MIN_READABLE)
    return fig


def cache_bytes(cfg, positions: int, src_len: int, bytes_per_value: int = 4) -> dict[str, int]:
    """Bytes in the decoder's KV cache after ``positions`` target positions were fed.

    ``self = layers × heads × d_k × positions × 2 (K and V) × bytes_per_value``; ``cross`` is the same with
    ``src_len`` in place of ``positions`` for an encoder-decoder model, and 0 before the first step (the
    cross-attention K/V are computed at the first decoding step, then reused).

    Args:
        cfg: a :class:`model.config.ModelConfig` (``n_decoder_layers``, ``n_heads``, ``d_model``,
            ``is_encoder_decoder``).
        bytes_per_value: 4 for float32, 2 for float16 / bfloat16.

    Returns:
        ``{"self": …, "cross": …, "total": …}`` like ``KVCache.nbytes()``.
    """
    d_k = cfg.d_model // cfg.n_heads
    per_position = cfg.n_decoder_layers * cfg.n_heads * d_k * 2 * bytes_per_value
    positions = max(0, int(positions))
    self_b = per_position * positions
    cross_b = per_position * int(src_len) if getattr(cfg, "is_encoder_decoder", True) and positions > 0 else 0
    return {"self": self_b, "cross": cross_b, "total": self_b + cross_b}
