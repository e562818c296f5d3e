"""Decoding figures: the next-token distribution of one step."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from .attention import FONT, display_token


def top_tokens_bar(tokens: Sequence[str], probs: Sequence[float], chosen: int | None = 0, title: str = "") -> go.Figure:
    """Horizontal bars of the most probable next tokens, most probable on top.

    Args:
        tokens: BPE pieces, in descending probability.
        probs: their probabilities (0–1).
        chosen: index of the token that was picked (drawn in the accent colour), or ``None``.
    """
    if len(tokens) != len(probs):
        raise ValueError("one probability per token is needed")
    labels = [f"{display_token(t)}" for t in tokens]
    # Keep duplicates apart (two pieces can display alike): prefix the rank.
    labels = [f"{i + 1}. {l}" for i, l in enumerate(labels)]
    colors = ["#e4572e" if i == chosen else "#3a87c0" for i in range(len(tokens))]
    fig = go.Figure(
        go.Bar(
            x=list(probs), y=labels, orientation="h", marker_color=colors,
            text=[f"{p:.1%}" for p in probs], textposition="outside", cliponaxis=False,
            hovertemplate="%{y}: p = %{x:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left"), font=FONT,
        height=90 + 30 * len(tokens), margin=dict(l=10, r=40, t=50 if title else 20, b=30),
        xaxis=dict(range=[0, min(1.0, max(probs) * 1.25 if len(probs) else 1.0)], tickformat=".0%",
                   title_text="probability"),
        yaxis=dict(autorange="reversed"), plot_bgcolor="white",
    )
    return fig
