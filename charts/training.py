"""Training curves of several runs, overlaid, and a checkpoint's lineage leg by leg: pure functions from
``metrics.jsonl`` records (read by :mod:`charts.run_metrics`, which skips whatever is not a usable point) and a
model card's ``legs`` to Plotly figures. A language model's BLEU / chrF traces say "not measured". No Streamlit.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import plotly.graph_objects as go

from charts.run_metrics import X_AXES, by_step, finite_number, run_series
from viz.theme import AXIS_LINE, AXIS_ROOM, FONT, LIGHT_GRID, PLACEHOLDER, SERIES_PALETTE, legend_below
from viz.theme import INK as TEXT_COLOR

#: d3 number formats of the x value in the hover text.
X_FORMATS = {"step": ",.0f", "tokens seen": ",.0f", "wall time (minutes)": ",.1f"}

#: The charts: metric key in ``metrics.jsonl`` → (title, y-axis title, note for a run without any point).
METRICS: dict[str, tuple[str, str, str]] = {
    "loss": ("Training loss", "cross-entropy (nats/token)", "no log line yet"),
    "valid_loss": ("Validation loss", "cross-entropy (nats/token)", "no evaluation yet"),
    "valid_bleu": ("Validation BLEU", "BLEU (0–100)", "no evaluation yet"),
    "valid_chrf": ("Validation chrF", "chrF (0–100)", "no evaluation yet"),
    "tokens_per_s": ("Training throughput", "tokens / second", "no log line yet"),
    "lr": ("Learning rate (warmup, then 1/√step)", "learning rate", "no log line yet"),
}

#: Metrics that are scores from 0 to 100 (:func:`score_axis`).
SCORES = ("valid_bleu", "valid_chrf")
#: The least top (of 100) a score axis shows: scores all 0 at first sit at the bottom of a 0–10 axis.
SCORE_MIN_TOP = 10.0


def score_axis(values: Sequence[float], top: float = 100.0) -> list[float]:
    """The y range of a score from 0 to ``top`` (BLEU, chrF): from 0 to a little above the largest value, at least
    to :data:`SCORE_MIN_TOP` and at most to ``top``. Left to Plotly, a run whose scores were all 0 (a first
    evaluation, or a young run) drew them on a −1…1 axis, as if a score could be negative."""
    peak = max((v for v in values if math.isfinite(v)), default=0.0)
    return [0.0, min(top, max(SCORE_MIN_TOP, peak * 1.15))]


#: Legend note of a run whose evaluation lines lack the metric (a language model has no BLEU / chrF).
NOT_MEASURED = "not measured (language model)"

#: One colour per run, in order (:data:`viz.theme.SERIES_PALETTE`); after the colours run out, dashes.
PALETTE = SERIES_PALETTE
DASHES = ("solid", "dash", "dot")


def empty_note(records: Sequence[dict], metric: str) -> str:
    """Why a run has no point of ``metric``: :data:`NOT_MEASURED` for an evaluation metric of a run that has
    evaluated (``valid_loss``) without it, else the metric's note in :data:`METRICS` (e.g. "no evaluation yet")."""
    if metric.startswith("valid_") and metric != "valid_loss" and by_step(records, "valid_loss"):
        return NOT_MEASURED
    return METRICS[metric][2]


def run_styles(run_ids: Sequence[str]) -> dict[str, dict]:
    """A line style ``{color, dash}`` per run, by position: the same run keeps its colour on every chart.
    After the eight colours the dash pattern changes."""
    return {
        rid: {"color": PALETTE[i % len(PALETTE)], "dash": DASHES[(i // len(PALETTE)) % len(DASHES)]}
        for i, rid in enumerate(run_ids)
    }


def compare_figure(
    runs: Mapping[str, Sequence[dict]],
    metric: str,
    x: str = "step",
    styles: Mapping[str, dict] | None = None,
    height: int = 360,
) -> go.Figure:
    """One chart of ``metric`` (a key of :data:`METRICS`) with one line per run of ``runs`` (``{run id:
    metrics.jsonl records}``), against the x axis ``x`` (a key of :data:`X_AXES`).

    Every run gets exactly one trace, named by its run id, so the legends of all charts list the same runs in
    the same colours (``styles``, by default :func:`run_styles` of ``runs``' order); a run without any point
    keeps an empty trace whose legend entry says why (e.g. "no evaluation yet", or :data:`NOT_MEASURED` for the
    BLEU / chrF of a language model).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r} (one of {', '.join(METRICS)})")
    title, y_title, no_points_note = METRICS[metric]
    styles = {**run_styles(list(runs)), **(styles or {})}
    fig = go.Figure()
    any_points = False
    for rid, records in runs.items():
        xs, ys = run_series(records, metric, x)
        style = styles[rid]
        few = len(xs) < 40
        # a run without points gets one null point: Plotly leaves a trace without data out of the legend
        fig.add_trace(
            go.Scatter(
                x=xs if xs else [None],
                y=ys if ys else [None],
                name=str(rid) if xs else f"{rid} ({empty_note(records, metric)})",
                legendgroup=str(rid),
                mode="lines+markers" if few else "lines",
                line=dict(color=style["color"], dash=style.get("dash", "solid"), width=3),
                marker=dict(size=8, color=style["color"]),
                hovertemplate=f"<b>{rid}</b><br>{x} %{{x:{X_FORMATS[x]}}}<br>{title.split(' (')[0]} %{{y:,.4~r}}"
                "<extra></extra>",
            )
        )
        any_points = any_points or bool(xs)
    _layout(fig, title, X_AXES[x], y_title, height, small_numbers=metric == "lr")
    if x != "wall time (minutes)":
        _whole_numbers(fig)
    if metric in SCORES:
        fig.update_yaxes(range=score_axis([v for t in fig.data for v in t.y if v is not None]))
    if not any_points:
        notes = {empty_note(records, metric) for records in runs.values()}
        note = notes.pop() if len(notes) == 1 else no_points_note
        fig.add_annotation(
            text=note[0].upper() + note[1:] if runs else "No run selected",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            font=dict(size=18, color=PLACEHOLDER),
        )
    return fig


def _layout(
    fig: go.Figure,
    title: str,
    x_title: str,
    y_title: str,
    height: int,
    small_numbers: bool = False,
    title_size: int = 18,
) -> None:
    """The look every training chart shares: title at the left, the legend under the x-axis title, axes that make room
    for their tick labels (``small_numbers``: ticks like 2e-4 instead of SI prefixes such as 200μ)."""
    # the legend at the bottom of the figure, under the x-axis title (at y = −0.22 of the plot it sat on it)
    legend, bottom = legend_below([t.name for t in fig.data])
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=title_size, color=TEXT_COLOR)),
        font=FONT,
        height=height + bottom - AXIS_ROOM,
        template="plotly_white",
        hovermode="closest",
        showlegend=True,
        margin=dict(l=10, r=10, t=50, b=bottom),
        legend=legend,
    )
    fig.update_xaxes(title_text=x_title, automargin=True, showline=True, linecolor=AXIS_LINE, gridcolor=LIGHT_GRID)
    fig.update_yaxes(
        title_text=y_title,
        automargin=True,
        showline=True,
        linecolor=AXIS_LINE,
        gridcolor=LIGHT_GRID,
        exponentformat="e" if small_numbers else "B",
    )


def _whole_numbers(fig: go.Figure) -> None:
    """An x axis of steps or tokens ticks at whole numbers: around a lone point (a run's first evaluation) Plotly
    ticked "12, 12.5, 13, 13.5, 14" optimizer steps."""
    xs = [v for t in fig.data for v in (t.x or ()) if isinstance(v, (int, float))]
    if xs and max(xs) - min(xs) < 5:
        fig.update_xaxes(dtick=1, tickformat=",d")


def run_figure(
    records: Sequence[dict],
    series: Mapping[str, str],
    title: str,
    y_title: str,
    height: int = 300,
    log_y: bool = False,
    score: bool = False,
) -> go.Figure:
    """One run's curves on one chart: ``series`` maps a legend label to a key of its ``metrics.jsonl`` records
    (any numeric key, e.g. ``{"train loss": "loss", "valid loss": "valid_loss"}``), against the step.

    Colours follow :data:`PALETTE` in ``series`` order; with two or more series there is a legend, where a series
    without points says "no points yet". ``log_y`` takes a log axis only when the values span more than a factor of
    10 (a log axis over a narrow range has no readable ticks). ``score``: the series are scores from 0 to 100 (BLEU,
    chrF), drawn on :func:`score_axis`. Bad records are skipped as in :func:`run_series`.
    """
    fig = go.Figure()
    values: list[float] = []
    for i, (label, key) in enumerate(series.items()):
        points = by_step(records, key)
        xs, ys = sorted(points), [points[s] for s in sorted(points)]
        values += ys
        color = PALETTE[i % len(PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=xs if xs else [None],
                y=ys if ys else [None],
                name=label if xs else f"{label} (no points yet)",
                mode="lines+markers" if len(xs) < 40 else "lines",
                line=dict(color=color, width=2.5),
                marker=dict(size=7, color=color),
                hovertemplate=f"<b>{label}</b><br>step %{{x:,.0f}}<br>%{{y:,.4~r}}<extra></extra>",
            )
        )
    _layout(fig, title, "step", y_title, height, small_numbers=any(0 < abs(v) < 1e-2 for v in values), title_size=16)
    _whole_numbers(fig)
    fig.update_layout(showlegend=len(series) > 1)  # one series: the title names it
    positive = [v for v in values if v > 0]
    if log_y and positive and len(positive) == len(values) and max(positive) > 10 * min(positive):
        fig.update_yaxes(type="log")
    if score:
        fig.update_yaxes(range=score_axis(values))
    return fig


def compare_figures(
    runs: Mapping[str, Sequence[dict]],
    x: str = "step",
    metrics: Sequence[str] = tuple(METRICS),
    styles: Mapping[str, dict] | None = None,
    height: int = 360,
) -> dict[str, go.Figure]:
    """:func:`compare_figure` for each of ``metrics`` (default: all of :data:`METRICS`), with the same colours
    on every chart (``styles``, by default :func:`run_styles` of ``runs``' order)."""
    styles = {**run_styles(list(runs)), **(styles or {})}
    return {m: compare_figure(runs, m, x, styles=styles, height=height) for m in metrics}


#: The scores a model card's ``legs`` list may hold → legend label (:func:`legs_figure`).
LEG_SCORES: dict[str, str] = {
    "everyday_chrf": "everyday sentences chrF",
    "valid_chrf": "Ding valid chrF",
    "test_chrf": "Ding test chrF",
    "flores_chrf": "FLORES-200 devtest chrF (news, Wikipedia)",
}


def _leg_hover(points: Sequence[tuple[float, float, Mapping]]) -> list[list]:
    """Hover data of ``(tokens in millions, score, leg)`` points: the leg's name."""
    return [[str(leg.get("leg", ""))] for _, _, leg in points]


def legs_figure(legs: Sequence[Mapping], height: int = 340, labels: Mapping[str, str] | None = None) -> go.Figure:
    """How a checkpoint was trained, leg by leg: its scores after each leg against the cumulative tokens of
    training (millions). Tokens, not minutes: a lineage may start on a GPU and go on on two CPU cores, whose minutes
    differ ~100-fold, while a token is a token on either.

    ``legs`` is a model card's ``legs`` list (``checkpoints/en-de/card.json``): one mapping per training leg with
    ``leg`` (a short name), ``tokens_seen`` (cumulative, tokens), ``shipped`` (bool: whether that leg's model was
    the shipped one) and any of :data:`LEG_SCORES` (chrF, 0–100), in training order. The legs up to the last shipped
    one are the solid curve; a leg after it, not shipped, is a hollow marker on a dotted segment: what was tried.
    Legs without a numeric ``tokens_seen`` and scores that are missing or not finite are skipped, never raised on.
    ``labels`` renames scores (a card's ``legs_labels``: which valid and test sets its lineage was scored on).
    """
    names = {**LEG_SCORES, **{k: str(v) for k, v in (labels or {}).items() if k in LEG_SCORES}}
    rows = [leg for leg in legs if isinstance(leg, Mapping) and finite_number(leg.get("tokens_seen")) is not None]
    fig = go.Figure()
    for i, (key, label) in enumerate(names.items()):
        points = [
            (float(leg["tokens_seen"]) / 1e6, v, leg) for leg in rows if (v := finite_number(leg.get(key))) is not None
        ]
        if not points:
            continue
        color = PALETTE[i % len(PALETTE)]
        # The lineage up to the shipped model is the solid curve, its evaluations along the way included (a card
        # marks only the model shipped now); what was tried after it branches off dotted. A score taken only along
        # the way (the trainer's valid set at every evaluation), with no shipped point, is the curve itself.
        last = max((j for j, p in enumerate(points) if p[2].get("shipped", True)), default=len(points) - 1)
        shipped, tried = points[: last + 1], points[last + 1 :]
        hover = f"<b>{label}</b>: %{{y:.2f}}<br>%{{customdata[0]}}<br>%{{x:,.1f}}M tokens<extra></extra>"
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in shipped],
                y=[p[1] for p in shipped],
                name=label,
                mode="lines+markers",
                line=dict(color=color, width=2.5),
                marker=dict(size=9, color=color),
                customdata=_leg_hover(shipped),
                legendgroup=key,
                hovertemplate=hover,
            )
        )
        if tried and shipped:  # the step from the last shipped model to what was tried after it
            dotted = [shipped[-1], *tried]
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in dotted],
                    y=[p[1] for p in dotted],
                    mode="lines+markers",
                    line=dict(color=color, width=2, dash="dot"),
                    legendgroup=key,
                    showlegend=False,
                    marker=dict(size=[0] + [10] * len(tried), color="white", line=dict(color=color, width=2)),
                    customdata=_leg_hover(dotted),
                    hovertemplate=hover,
                )
            )
    _layout(
        fig,
        "Scores after each training leg (hollow: tried, not shipped)",
        "tokens of training (millions), cumulative",
        "chrF (0–100)",
        height,
        title_size=16,
    )
    if not fig.data:
        fig.add_annotation(
            text="This model's card has no training legs",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            font=dict(size=18, color=PLACEHOLDER),
        )
    return fig
