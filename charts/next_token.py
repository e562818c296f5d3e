"""One next-token choice: the most probable next tokens of a step (the Translate view's top-10 list) and the sampling
pipeline that turns the scores into a pick (the Decoding lab). The beam tree is :mod:`charts.beam`, the KV cache
:mod:`charts.kv_cache`. Pure functions: arrays and labels in, Plotly figures — or, for the per-click top-10 list,
an HTML fragment — out; no Streamlit, no model."""

from __future__ import annotations

import unicodedata
from typing import Callable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.theme import (
    ACCENT,
    CHIP_BG,
    DARK_TEXT,
    FONT,
    GREY,
    INK,
    MIN_READABLE,
    MONO,
    TITLE_FONT,
    TOKEN_FONT,
    WHITE,
    escape_html,
)
from viz.theme import STEEL as BLUE
from viz.token_labels import display_token, plotly_escape

#: The top-k list's piece column is at least this wide (ch: characters of the monospace font), wider for a longer
#: piece.
TOPK_PIECE_MIN_CH = 16


def _mono_width(text: str) -> int:
    """How many ``ch`` a text takes in a monospace font: a wide (East Asian) character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def top_tokens_html(tokens: Sequence[str], probs: Sequence[float], chosen: int | None = 0, title: str = "") -> str:
    """The most probable next tokens as a ranked list of horizontal bars, most probable on top: an HTML fragment,
    not a chart, so that a step of the Translate view redraws in the browser at once (a Plotly bar
    chart here cost 0.1–0.4 s of the browser's main thread on every click).

    Args:
        tokens: BPE pieces, in descending probability (shown with :func:`viz.token_labels.display_token`).
        probs: their probabilities (0–1); a bar's length is its probability, on one scale from 0 to 100 % for
            every step (scaled to the largest, a 2.8 % first choice drew as long as a 92.8 % one).
        chosen: index of the token that was picked (accent colour, bold), or ``None``.
        title: a heading above the list ('' for none).

    Raises:
        ValueError: when ``tokens`` and ``probs`` differ in length.
    """
    if len(tokens) != len(probs):
        raise ValueError("one probability per token is needed")
    labels = [f"{i + 1}. {display_token(tok)}" for i, tok in enumerate(tokens)]
    # The piece column as wide as the longest label (monospace: its characters, wide ones twice), so that every bar
    # starts at one x and no piece is cut: a fixed 9.5em cut "▁Konferenz" to "▁Ko…" beside an open sidebar (a piece
    # wider than a phone's row goes on over a second line)
    piece_ch = max([TOPK_PIECE_MIN_CH] + [_mono_width(label) for label in labels]) + 0.5
    rows = []
    for i, (label, p) in enumerate(zip(labels, probs, strict=True)):
        p = float(p)
        width = 100.0 * min(max(p, 0.0), 1.0)
        colour, weight = (ACCENT, "700") if i == chosen else (BLUE, "400")
        # rank + piece | bar | percentage; the rank keeps pieces that display alike apart
        rows.append(
            f'<div class="ae-topk-row" title="p = {p:.4f}" style="display:flex;align-items:center;gap:8px;'
            f'margin:1px 0;font-size:1.05rem">'
            f'<span class="ae-topk-piece" style="flex:0 1 {piece_ch:g}ch;min-width:0;overflow-wrap:anywhere;'
            f'font-family:{MONO};color:{INK};font-weight:{weight}">{escape_html(label)}</span>'
            f'<span style="flex:1 1 auto;background:{CHIP_BG};border-radius:3px;height:1.05em">'
            f'<span style="display:block;width:{width:.1f}%;height:100%;background:{colour};border-radius:3px">'
            f"</span></span>"
            f'<span style="flex:0 0 4.2em;text-align:right;color:{INK};font-weight:{weight}">{p:.1%}</span></div>'
        )
    head = (
        f'<div style="font-weight:600;font-size:1.05rem;color:{INK};margin-bottom:4px">{escape_html(title)}</div>'
        if title
        else ""
    )
    return f'<div class="ae-topk">{head}{"".join(rows) or "<i>no candidates</i>"}</div>'


# --- decoding lab -----------------------------------------------------------------------------------------
#: Gap between the pipeline's four panels (fraction of the width): room for each panel's end tick labels.
PANEL_GAP = 0.07
#: The x range of every probability panel of :func:`pipeline_figure`: 0 to 100 %, with room for a label past the
#: end of a short bar (a bar long enough holds its label inside).
PROB_RANGE = (0.0, 1.12)
#: Room (px) a probability's bar must have beyond its text to hold it inside: the panels are narrow, and a text
#: Plotly finds too long for its bar it shrinks to nothing (a probability's text is never shrunk, see below).
PROB_SPARE = 20
#: Space (px) between the pipeline's token names and its first panel: a value written at the end of a long bar
#: stood against the names.
LABEL_STANDOFF = 10
#: What follows a punctuation piece the rule did not keep (:func:`_struck`).
NOT_KEPT_MARK = "✗"
#: Width (px) of the pipeline chart at 1280×720: the Decoding lab's main column, beside the rule's controls.
PIPELINE_PX = 630
#: What the first panel of :func:`pipeline_figure` may hold: the decoder's log-probabilities (what
#: :class:`decoding.stepping.Stepper` hands a decoding rule) or raw logits. Title of the panel, then of the second.
SCORE_TITLES = {
    "log p": ("log p<br>(log-softmax)", "log p ÷ T"),
    "logits": ("logits<br> ", "logits ÷ T"),
}


def _bar_text_places(
    values: np.ndarray, texts: Sequence[str], panel_px: float, span: float | None = None, spare: float = 0.0
) -> list[str]:
    """``"inside"`` for each bar long enough to hold its text at full size (and ``spare`` px more), else
    ``"outside"`` (past its end): Plotly shrinks a text inside a short bar until it can no longer be read.
    ``span``: the panel's axis range (default: the values' own, with 5 % to spare)."""
    span = span or (max(float(values.max()), 0.0) - min(float(values.min()), 0.0)) * 1.05 or 1.0
    text_px = [len(t) * 0.55 * FONT["size"] + 8 + spare for t in texts]
    return [
        "inside" if abs(v) / span * panel_px >= need else "outside" for v, need in zip(values, text_px, strict=True)
    ]


def _struck(label: str, piece: str) -> str:
    """A row label (``label``, the escaped ``piece``) of a token the rule did not keep: struck through when the piece
    has a letter or digit; a piece of punctuation alone gets a cross after it instead, since a line through it makes
    another sign of it (a struck "." or ":" reads "÷", a struck "-" vanishes)."""
    return f"<s>{label}</s>" if any(ch.isalnum() for ch in piece) else f"{label} {NOT_KEPT_MARK}"


def _np(x) -> np.ndarray:
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    return arr.astype(float) if arr.dtype != bool else arr


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - np.max(x))
    return z / z.sum()


def pipeline_rows(pipeline, top: int = 15) -> list[int]:
    """Token ids shown by :func:`pipeline_figure`: the ``top`` most probable under the raw logits
    (``softmax(logits)``, temperature 1), most probable first, plus the chosen token when it is not among them."""
    raw = _softmax(_np(pipeline.logits))
    order = np.argsort(-raw, kind="stable")[: max(1, top)].tolist()
    if int(pipeline.token_id) not in order:
        order.append(int(pipeline.token_id))
    return [int(i) for i in order]


def pipeline_figure(
    pipeline,
    id_to_token: Callable[[int], str],
    top: int = 15,
    temperature: float | None = None,
    forced: bool = False,
    title: str = "",
    scores: str = "log p",
    banned: Sequence[int] = (),
) -> go.Figure:
    """One next-token choice as four stages side by side, sharing the token axis (rows):

    1. the scores the rule starts from; 2. those divided by the temperature ``T``; 3. ``softmax`` of those, with
    the tokens that the top-k / top-p cut removes greyed (and struck through in the row labels, or marked ✗ when
    the piece is punctuation alone) and the kept ones
    blue; 4. the renormalised distribution over the kept tokens, the chosen token in the accent colour.

    Each bar of the first two panels carries its value, inside the bar where it fits at full size and past the
    bar's end where the bar is too short for it (laid out for :data:`PIPELINE_PX`).

    Args:
        pipeline: any object with ``logits``, ``scaled``, ``probs``, ``final`` (``[vocab]`` floats), ``keep``
            (``[vocab]`` bool) and ``token_id`` (int), e.g. :class:`decoding.sampling.Pipeline`.
        id_to_token: id → BPE piece, for the row labels.
        top: rows shown: the ``top`` most probable tokens by raw probability (+ the chosen one if not among them).
        temperature: written in the second panel's title (``None``: greedy, no temperature).
        forced: the chosen token was forced by the user rather than picked by the rule.
        scores: what ``pipeline.logits`` holds, a key of :data:`SCORE_TITLES`: ``"log p"`` (the default) for the
            log-probabilities a :class:`decoding.stepping.Stepper` hands its rule (the logits less one constant, which
            the softmax ignores), ``"logits"`` for raw logits. The panels' titles say which.
        banned: tokens a rule was never offered (the loop guard's, :class:`decoding.stepping.StepRecord`'s
            ``banned``): their rows are struck through and marked "banned" where the cut's are marked "cut". The
            pipeline should carry their scores in ``logits`` and ``scaled`` (the model's) and 0 in ``probs``.

    Returns:
        A Plotly figure with 4 bar traces (one per stage, ``len(rows)`` bars each). ``layout.meta`` holds
        ``{"token_ids", "kept", "chosen"}`` for the rows (``chosen`` = row index of the chosen token).
    """
    rows = pipeline_rows(pipeline, top)
    logits, scaled, probs, final = (_np(getattr(pipeline, a))[rows] for a in ("logits", "scaled", "probs", "final"))
    barred = [i in set(banned) for i in rows]
    keep = np.asarray(_np(pipeline.keep)[rows], dtype=bool) & ~np.asarray(barred, dtype=bool)
    chosen = rows.index(int(pipeline.token_id))
    pieces = [display_token(id_to_token(i)) for i in rows]
    labels = []
    for r, (piece, kept) in enumerate(zip(pieces, keep, strict=True)):
        text = plotly_escape(piece)
        text = text if kept else _struck(text, piece)
        text = f"<b>{text}</b>" if r == chosen else text
        labels.append(f"{r + 1}. {text}")
    first, divided = SCORE_TITLES[scores]
    t_text = "greedy:<br>no temperature" if temperature is None else f"{divided}<br>(T = {temperature:g})"
    fig = make_subplots(
        rows=1,
        cols=4,
        shared_yaxes=True,
        horizontal_spacing=PANEL_GAP,
        subplot_titles=(
            first,
            t_text,
            "softmax, then the<br>top-k / top-p cut"
            if temperature is not None
            else "softmax; greedy keeps<br>only the argmax",
            "renormalised<br>→ pick",
        ),
    )
    label_px = (
        max(len(f"{r + 1}. {p}") + 2 * (not k) for r, (p, k) in enumerate(zip(pieces, keep, strict=True)))
        * 0.6
        * MIN_READABLE
        + 10
        + LABEL_STANDOFF
    )
    panel_px = (PIPELINE_PX - 40 - label_px) * (1 - 3 * PANEL_GAP) / 4
    y = list(range(len(rows)))
    kept_or_grey = [BLUE if k else GREY for k in keep]
    scored = [GREY if b else BLUE for b in barred]  # a banned token's score is the model's, never the rule's
    final_colors = [ACCENT if r == chosen else (BLUE if k else GREY) for r, k in enumerate(keep)]
    status = [
        "banned by the loop guard" if b else "kept" if k else "removed by the cut"
        for k, b in zip(keep, barred, strict=True)
    ]
    stages = [
        ("logits", logits, scored, [f"{v:.2f}" for v in logits]),
        ("scaled", scaled, scored, [f"{v:.2f}" for v in scaled]),
        (
            "probs",
            probs,
            kept_or_grey,
            [
                "banned" if b else f"{v:.1%}" if k else f"{v:.1%} cut"
                for v, k, b in zip(probs, keep, barred, strict=True)
            ],
        ),
        (
            "final",
            final,
            final_colors,
            [f"{v:.1%}" if k or r == chosen else "" for r, (v, k) in enumerate(zip(final, keep, strict=True))],
        ),
    ]
    hover_names = {
        "logits": scores,
        "scaled": "greedy" if temperature is None else f"{scores} ÷ T",
        "probs": "softmax",
        "final": "renormalised",
    }
    for col, (name, values, colors, bar_texts) in enumerate(stages, start=1):
        # a probability's text goes inside its bar where the bar holds it: past the end of a 100 % bar it ran
        # off the panel
        prob = col > 2
        places = _bar_text_places(
            values, bar_texts, panel_px, PROB_RANGE[1] if prob else None, PROB_SPARE if prob else 0
        )
        fig.add_trace(
            go.Bar(
                x=values.tolist(),
                y=y,
                orientation="h",
                name=name,
                marker_color=colors,
                marker_pattern_shape=["" if k else "/" for k in keep] if name == "probs" else None,
                text=bar_texts,
                textposition=places,
                insidetextanchor="start",
                textfont=dict(
                    color=[
                        WHITE if p == "inside" and c != GREY else DARK_TEXT for p, c in zip(places, colors, strict=True)
                    ]
                ),
                cliponaxis=False,
                constraintext="none" if prob else "both",
                showlegend=False,
                customdata=np.array([[p, s] for p, s in zip(pieces, status, strict=True)], dtype=object),
                hovertemplate="%{customdata[0]}: %{x:.4f} (%{customdata[1]})<extra>" + hover_names[name] + "</extra>",
            ),
            row=1,
            col=col,
        )
    for col in (3, 4):  # probabilities on one 0–100 % scale: a bar shows its probability, not its share of the top
        fig.update_xaxes(range=list(PROB_RANGE), tickvals=[0, 0.5, 1], ticktext=["0", "50%", "100%"], row=1, col=col)
    fig.update_yaxes(
        tickvals=y,
        ticktext=labels,
        autorange="reversed",
        tickfont=TOKEN_FONT,
        automargin=True,
        ticklabelstandoff=LABEL_STANDOFF,
        row=1,
        col=1,
    )
    # At most 3 ticks on the logit axes, and a gap between panels: with 2.5 % and automatic ticks the last label
    # of one panel ran into the first of the next ("0−15").
    for col in (1, 2):
        fig.update_xaxes(nticks=3, row=1, col=col)
    fig.update_xaxes(automargin=True, tickfont=dict(size=MIN_READABLE))
    verb = "forced" if forced else "chosen"
    fig.update_layout(
        title=dict(
            text=title or f"Next-token choice: {verb} “{plotly_escape(pieces[chosen])}”",
            x=0.0,
            xanchor="left",
            font=TITLE_FONT,
        ),
        font=FONT,
        height=150 + 26 * len(rows),
        margin=dict(l=10, r=30, t=100, b=30),
        plot_bgcolor=WHITE,
        bargap=0.25,
        meta={"token_ids": rows, "kept": keep.tolist(), "chosen": chosen},
    )
    fig.update_annotations(font_size=MIN_READABLE)
    return fig
