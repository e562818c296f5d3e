"""How every picture writes token pieces: their shown form, escaped for Plotly, shortened, how wide they are, and
the axes that write every one of them (level, upright, or over tiers). Pure functions; no Streamlit, no model.

Pieces arrive as the page shows them (``ui.pieces``); a chart never sees a tokenizer.
"""

from __future__ import annotations

import html
from typing import Sequence

import plotly.graph_objects as go

from viz.theme import AXIS_TITLE_FONT, GREY, INK, LINE_EM, MONO, MONO_CHAR_EM, TITLE_STANDOFF, LabelPlan, tier_px


def display_token(piece: str) -> str:
    """A piece as every chart shows it: as the page hands it, already in its tokenizer's shown form (``ui.pieces``:
    ours and Marian's as stored, ``▁`` marking a word start; GPT-2's ``Ġthe`` as ``␣the``).

    ``"▁Bobby"`` → ``"▁Bobby"``, ``"berries"`` → ``"berries"`` (a piece without ``▁`` continues the word before).
    One convention for the whole app, so that the Tokenization page's merges and every chart read alike
    (:func:`viz.labels.word_start_note` explains it where pieces are shown).
    """
    return piece


def plotly_escape(text: str) -> str:
    """``text`` safe inside Plotly's label / hover mini-HTML: ``&``, ``<``, ``>`` escaped, quotes left alone
    (Plotly decodes ``&lt;`` but shows ``&quot;`` literally: a ``"`` token appeared as ``&quot;``)."""
    return html.escape(text, quote=False)


def shorten(label: str, limit: int = 14) -> str:
    """``label`` cut to ``limit`` characters, the last of them "…", where a chart has no room for a long piece."""
    return label if len(label) <= limit else label[: limit - 1] + "…"


#: Room (px) an axis title takes beside its axis, with its padding.
AXIS_TITLE_PX = 24


def label_px(labels: Sequence[str], size: int) -> float:
    """Width (px) of the longest of ``labels`` written level in the monospace token font at ``size`` px."""
    return max((len(t) for t in labels), default=0) * MONO_CHAR_EM * size


def token_axes(labels: Sequence[str], plan: LabelPlan, font: dict, title: str = "", **common) -> list[dict]:
    """The x axes that write every one of ``labels`` (one per cell, at ``0 … n−1``) as ``plan`` says
    (:func:`viz.theme.label_plan`): one layout dict per tier, ``[xaxis, xaxis2, …]``. Tier ``t`` holds labels
    ``t, t + tiers, …``; the tiers after the first overlay the first (same range) and draw their ticks as pale
    leader lines down past the tiers above them, to their labels. The axis ``title`` goes on the last (outermost)
    tier, :data:`viz.theme.TITLE_STANDOFF` px from its labels. ``common``: more settings of every tier."""
    depth = tier_px(labels, plan.size)
    tick_font = {**font, "size": plan.size}
    axes = []
    for t in range(plan.tiers):
        kept = list(range(t, len(labels), plan.tiers))
        axis = dict(
            tickvals=kept,
            ticktext=[labels[i] for i in kept],
            tickangle=plan.angle,
            tickfont=tick_font,
            showgrid=False,
            zeroline=False,
            automargin=True,
            **common,
        )
        if t:
            axis.update(
                overlaying="x",
                matches="x",
                anchor="y",
                side="bottom",
                ticks="outside",
                ticklen=t * depth,
                tickcolor=GREY,
            )
        axes.append(axis)
    if title:
        axes[-1].update(title=dict(text=title, font=AXIS_TITLE_FONT, standoff=TITLE_STANDOFF))
    return axes


def token_xaxes_into(
    data: list[dict], layout: dict, labels: Sequence[str], plan: LabelPlan, font: dict, title: str = "", **common
) -> None:
    """Put :func:`token_axes`' x axes into a ``layout`` dict, with an empty trace in ``data`` on each overlay axis
    (Plotly draws an axis only when a trace uses it). ``data``'s first trace stays the data."""
    for t, axis in enumerate(token_axes(labels, plan, font, title, **common)):
        layout[f"xaxis{t + 1 if t else ''}"] = axis
        if t:
            data.append(
                dict(
                    type="scatter",
                    x=[None],
                    y=[None],
                    xaxis=f"x{t + 1}",
                    hoverinfo="skip",
                    showlegend=False,
                    name=f"key labels, tier {t + 1}",
                )
            )


def hover_axes_into(data: list[dict], layout: dict, q_labels: Sequence[str], k_labels: Sequence[str]) -> str:
    """Move ``data``'s first trace (a heatmap: keys at x ``0 … n−1``, queries at y ``0 … m−1``) onto two axes laid
    over ``layout``'s drawn ``xaxis`` and ``yaxis`` that draw nothing and hold every piece in full, so that its
    hover reads a cell's query and key from them; returns the hover template's first line, ``"query <b>▁the</b>
    (row 2)<br>key <b>▁cat</b> (column 1)"`` for that cell.

    Plotly writes ``%{x}`` on an axis with ``tickvals`` as the tick text at that value, and ``%{x:d}`` as the
    number. The drawn axes cannot say it: their labels are shortened, and over tiers spread across axes. A hover
    string per cell made a 128-piece map 16,384 strings, 2.4 of its 2.5 MB, at every draw; the axes hold 256. An
    empty trace keeps the drawn axes drawn (Plotly draws an axis only when a trace uses it)."""
    hidden = dict(showticklabels=False, ticks="", showgrid=False, zeroline=False, showline=False)

    def hover_axis(labels: Sequence[str], over: str, anchor: str) -> dict:
        written = dict(tickvals=list(range(len(labels))), ticktext=[plotly_escape(t) for t in labels])
        return dict(hidden, **written, overlaying=over, matches=over, anchor=anchor)

    x_name = f"x{sum(1 for k in layout if k.startswith('xaxis')) + 1}"
    layout[f"xaxis{x_name[1:]}"] = hover_axis(k_labels, "x", "y")
    layout["yaxis2"] = dict(hover_axis(q_labels, "y", "x"), autorange=layout.get("yaxis", {}).get("autorange", True))
    data[0].update(xaxis=x_name, yaxis="y2")
    # lines only: a trace with markers would add the select tools to the chart's toolbar
    data.append(
        dict(type="scatter", mode="lines", x=[None], y=[None], hoverinfo="skip", showlegend=False, name="drawn axes")
    )
    return "query <b>%{y}</b> (row %{y:d})<br>key <b>%{x}</b> (column %{x:d})"


def set_token_xaxes(
    fig: go.Figure, labels: Sequence[str], plan: LabelPlan, font: dict, title: str = "", **common
) -> None:
    """Lay ``fig``'s x axis out as :func:`token_axes` says (:func:`token_xaxes_into`, for a figure already
    built)."""
    data: list[dict] = []
    layout: dict = {}
    token_xaxes_into(data, layout, labels, plan, font, title, **common)
    for name, axis in layout.items():
        fig.layout[name] = axis
    for trace in data:
        fig.add_trace(go.Scatter({k: v for k, v in trace.items() if k != "type"}))


def labels_depth(labels: Sequence[str], plan: LabelPlan) -> float:
    """Depth (px) ``labels`` laid out by ``plan`` take under an axis: one line when level, else every tier."""
    if plan.angle == 0:
        return LINE_EM * plan.size
    return (plan.tiers - 1) * tier_px(labels, plan.size) + label_px(labels, plan.size)


def token_yaxis(labels: Sequence[str], size: int, title: str = "") -> dict:
    """A vertical axis that writes every one of ``labels`` (one per row, level, monospace ``size`` px; the
    figure must give each row a line), its ``title`` :data:`viz.theme.TITLE_STANDOFF` px from them."""
    axis = dict(
        tickvals=list(range(len(labels))),
        ticktext=list(labels),
        tickfont=dict(family=MONO, size=size, color=INK),
        showgrid=False,
        zeroline=False,
        automargin=True,
    )
    if title:
        axis["title"] = dict(text=title, font=AXIS_TITLE_FONT, standoff=TITLE_STANDOFF)
    return axis
