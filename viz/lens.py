"""The logit lens drawn: what each decoder layer would predict, from arrays and pieces (no model, no Streamlit).

Two views of :class:`reading.lens.Lens` numbers, handed over as plain sequences by ``reading_views/lens.py``:

* :func:`lens_table_html`, one step: a row per layer (first to last, the last being the model's own output), its
  top pieces as cells shaded by probability, the token taken outlined, and the taken token's probability and rank
  as a bar. HTML, not a chart: the Translate page redraws it on every click and loads no Plotly.
* :func:`lens_table_svg`, the same step as a standalone SVG picture (the Translate page's export: that page draws no
  chart whose camera button would save one).
* :func:`lens_figure`, every step so far: a layers × steps heatmap of the taken token's probability, each cell
  labelled with that layer's top guess, so one sees at which depth each answer forms.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.attention import COLORBAR_PX, scale_colours
from viz.theme import (
    ACCENT,
    ATTENTION_SCALE,
    BLUE,
    CHIP_BG,
    FONT,
    INK,
    LINE_EM,
    MIN_READABLE,
    MONO,
    MONO_CHAR_EM,
    PAGE_PX,
    SANS,
    SUBTLE,
    TITLE_STANDOFF,
    WHITE,
    escape_html,
    label_plan,
    title_chars,
    title_margin,
    wrap_title,
)
from viz.theme import title as _title
from viz.token_labels import (
    AXIS_TITLE_PX,
    display_token,
    label_px,
    labels_depth,
    plotly_escape,
    set_token_xaxes,
    token_yaxis,
)

#: Shade (probability) from which a cell's text turns white: the scale's blue is dark enough there.
WHITE_TEXT_FROM = 0.35


def _check(n_layers: int, *columns: Sequence) -> None:
    if any(len(c) != n_layers for c in columns):
        raise ValueError(f"every column needs one entry per layer ({n_layers} layer labels)")


def lens_table_html(
    layer_labels: Sequence[str],
    top_pieces: Sequence[Sequence[str]],
    top_probs: Sequence[Sequence[float]],
    chosen_cols: Sequence[int | None],
    chosen_probs: Sequence[float],
    chosen_ranks: Sequence[int],
    chosen_piece: str,
    first_top: int | None,
    title: str = "",
    large: bool = False,
) -> str:
    """One step of the logit lens as an HTML table, a row per decoder layer (in order; the last is the output).

    Args:
        layer_labels: a label per layer (``"1"`` … ``"6"``); the last row is marked as the model's output.
        top_pieces / top_probs: per layer, its most probable pieces (as the page shows them) and their
            probabilities (0–1), most probable first (``[layers][k]``).
        chosen_cols: per layer, the column of ``top_pieces`` that is the token taken, or ``None`` when it is not
            among them.
        chosen_probs / chosen_ranks: per layer, the probability (0–1) and rank (1 = top) of the token taken.
        chosen_piece: the token taken, as shown.
        first_top: the row (0-based) of the first layer whose top guess is the token taken (marked ★), or ``None``.
        title: a heading above the table ('' for none).
        large: presentation mode: pieces 16 px and numbers 15 px instead of 15 and 14.

    Returns:
        An HTML fragment (every piece escaped). Each row carries ``data-layer`` (0-based) and ``data-p`` (the token
        taken's probability, 4 decimals); each piece cell ``data-p`` and, for the token taken, ``data-chosen``.
        Colours sit on the table's cells and the fonts on its ``div`` s (presentation mode's CSS recolours a ``div``
        with a colour and enlarges a monospace ``span``).

    Raises:
        ValueError: a column whose length is not the number of layers.
    """
    n = len(layer_labels)
    _check(n, top_pieces, top_probs, chosen_cols, chosen_probs, chosen_ranks)
    piece_px, num_px = (16, 15) if large else (15, 14)
    k = max((len(row) for row in top_pieces), default=0)
    cell = "border:0;padding:3px 3px;vertical-align:middle"
    head = "".join(
        f'<th style="{cell};color:{SUBTLE};font-weight:600;text-align:left;background:none">{name}</th>'
        for name in ["layer", f"p({escape_html(display_token(chosen_piece))})"] + [f"{i + 1}." for i in range(k)]
    )
    shades = scale_colours([p for row in top_probs for p in row])
    rows, at = [], 0
    for layer, label in enumerate(layer_labels):
        star = " ★" if layer == first_top else ""
        mark = f"box-shadow:inset 4px 0 0 {ACCENT};font-weight:700" if star else "font-weight:600"
        output = '<div style="font-weight:400">output</div>' if layer == n - 1 else ""
        p, rank = float(chosen_probs[layer]), int(chosen_ranks[layer])
        # the number over a thin bar: a narrow column leaves the pieces their room
        bar = (
            f'<div style="white-space:nowrap">{p:.1%} #{rank}</div><div style="height:6px;background:{CHIP_BG};'
            f'border-radius:3px"><div style="width:{100 * min(max(p, 0.0), 1.0):.1f}%;height:100%;'
            f'background:{ACCENT if rank == 1 else BLUE};border-radius:3px"></div></div>'
        )
        cells = [
            f'<td style="{cell};color:{INK};background:none;text-align:right;white-space:nowrap;{mark}">'
            f"{escape_html(label)}{star}{output}</td>",
            f'<td style="{cell};color:{INK};background:none" title="p = {p:.4f}, rank {rank}">{bar}</td>',
        ]
        for col in range(k):
            if col >= len(top_pieces[layer]):
                cells.append(f'<td style="{cell};background:none"></td>')
                continue
            piece, q = display_token(top_pieces[layer][col]), float(top_probs[layer][col])
            shade, at = shades[at], at + 1
            chosen = chosen_cols[layer] == col
            ring = f"box-shadow:inset 0 0 0 3px {ACCENT};" if chosen else ""
            cells.append(
                f'<td data-p="{q:.4f}"{" data-chosen" if chosen else ""} title="{escape_html(piece)}: p = {q:.4f}" '
                f'style="{cell};{ring}background:{shade};color:{WHITE if q >= WHITE_TEXT_FROM else INK};'
                f'border-radius:3px;overflow:hidden">'
                f'<div style="font-family:{MONO};font-size:{piece_px}px;overflow-wrap:anywhere;'
                f'font-weight:{700 if chosen else 400}">{escape_html(piece)}</div>'
                f'<div style="white-space:nowrap">{q:.1%}</div></td>'
            )
        rows.append(f'<tr data-layer="{layer}" data-p="{p:.4f}">{"".join(cells)}</tr>')
    heading = (
        f'<div style="font-weight:600;font-size:1.05rem;margin-bottom:4px">{escape_html(title)}</div>' if title else ""
    )
    shown = escape_html(display_token(chosen_piece))
    where = (
        f"★ layer {escape_html(layer_labels[first_top])}: the first whose top guess it is."
        if first_top is not None
        else "No layer ranks it first."
    )
    note = (
        f'<div class="ae-lens-note" style="font-size:{num_px}px;margin-top:4px">Outlined: “{shown}”, the token '
        f"taken at this step; its probability and rank (#) at each layer beside the layer. {where}</div>"
    )
    # The first two columns in em of the table's own font size, so that they hold their numbers in both modes; the
    # pieces' columns as wide as their pieces (a fixed layout cut "▁Konferenz" to "▁Ko…" beside an open sidebar),
    # a piece wider than its share broken onto a second line rather than cut
    # The wrapper is a size container: in a column too narrow for five guesses a page may hide the last one (a CSS
    # container query: app.py) rather than break every piece
    return (
        f'<div class="ae-lens" style="container-type:inline-size">{heading}<table style="width:100%;'
        f"table-layout:auto;border-collapse:separate;"
        f'border-spacing:2px;margin:0;font-size:{num_px}px"><colgroup><col style="width:4em">'
        f'<col style="width:5.8em">{"<col>" * k}</colgroup><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{note}</div>"
    )


#: Sizes of :func:`lens_table_svg`, px: a row, the layer and probability columns, a piece column at least, the
#: piece text and the number under it.
SVG_ROW, SVG_LAYER, SVG_PROB, SVG_PIECE_MIN, SVG_PIECE_PX, SVG_NUM_PX = 44, 92, 112, 96, 16, 13


def lens_table_svg(
    layer_labels: Sequence[str],
    top_pieces: Sequence[Sequence[str]],
    top_probs: Sequence[Sequence[float]],
    chosen_cols: Sequence[int | None],
    chosen_probs: Sequence[float],
    chosen_ranks: Sequence[int],
    chosen_piece: str,
    first_top: int | None,
    title: str = "",
) -> str:
    """One step of the logit lens as a standalone SVG document: what :func:`lens_table_html` shows (arguments as
    there), a row per layer, the pieces shaded by probability on the attention colour scale, the token taken
    outlined and its probability as a bar. Text is escaped; sizes in px (:data:`SVG_ROW` …); the width follows the
    longest piece. Raises ``ValueError`` for a column whose length is not the number of layers."""
    n = len(layer_labels)
    _check(n, top_pieces, top_probs, chosen_cols, chosen_probs, chosen_ranks)
    k = max((len(row) for row in top_pieces), default=0)
    shown = [[display_token(p) for p in row] for row in top_pieces]
    longest = max((len(p) for row in shown for p in row), default=1)
    col = max(SVG_PIECE_MIN, round(longest * MONO_CHAR_EM * SVG_PIECE_PX) + 16)
    top = 64 if title else 32
    width, height = SVG_LAYER + SVG_PROB + k * col + 8, top + n * SVG_ROW + 56
    esc = escape_html
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{esc(SANS)}" font-size="{SVG_NUM_PX}">',
        f'<rect width="{width}" height="{height}" fill="{WHITE}"/>',
    ]
    if title:
        parts.append(f'<text x="4" y="24" font-size="18" font-weight="600" fill="{INK}">{esc(title)}</text>')
    head_y = top - 10
    parts.append(
        f'<text x="{SVG_LAYER - 8}" y="{head_y}" text-anchor="end" fill="{SUBTLE}" font-weight="600">'
        f'layer</text><text x="{SVG_LAYER + 4}" y="{head_y}" fill="{SUBTLE}" font-weight="600">'
        f"p({esc(display_token(chosen_piece))})</text>"
    )
    for c in range(k):
        parts.append(
            f'<text x="{SVG_LAYER + SVG_PROB + c * col + 4}" y="{head_y}" fill="{SUBTLE}" '
            f'font-weight="600">{c + 1}.</text>'
        )
    shades = iter(scale_colours([p for row in top_probs for p in row]))
    for layer, label in enumerate(layer_labels):
        y = top + layer * SVG_ROW
        star = " ★" if layer == first_top else ""
        name = label + (" · output" if layer == n - 1 else "") + star
        parts.append(
            f'<text x="{SVG_LAYER - 8}" y="{y + 27}" text-anchor="end" fill="{INK}" '
            f'font-weight="{700 if star else 600}">{esc(name)}</text>'
        )
        p, rank = min(max(float(chosen_probs[layer]), 0.0), 1.0), int(chosen_ranks[layer])
        bar = SVG_PROB - 14
        parts.append(
            f'<text x="{SVG_LAYER + 4}" y="{y + 19}" fill="{INK}">{p:.1%} #{rank}</text>'
            f'<rect x="{SVG_LAYER + 4}" y="{y + 26}" width="{bar}" height="6" rx="3" fill="{CHIP_BG}"/>'
            f'<rect x="{SVG_LAYER + 4}" y="{y + 26}" width="{bar * p:.1f}" height="6" rx="3" '
            f'fill="{ACCENT if rank == 1 else BLUE}"/>'
        )
        for c, (piece, q) in enumerate(zip(shown[layer], top_probs[layer], strict=True)):
            x, q = SVG_LAYER + SVG_PROB + c * col, float(q)
            chosen = chosen_cols[layer] == c
            ink = WHITE if q >= WHITE_TEXT_FROM else INK
            ring = f' stroke="{ACCENT}" stroke-width="3"' if chosen else ""
            flag = ' data-chosen="1"' if chosen else ""
            parts.append(
                f'<g data-layer="{layer}" data-p="{q:.4f}"{flag}>'
                f'<rect x="{x + 2}" y="{y + 2}" width="{col - 4}" height="{SVG_ROW - 4}" rx="3" '
                f'fill="{next(shades)}"{ring}/>'
                f'<text x="{x + 8}" y="{y + 20}" font-family="{esc(MONO)}" font-size="{SVG_PIECE_PX}" '
                f'fill="{ink}" font-weight="{700 if chosen else 400}" xml:space="preserve">{esc(piece)}</text>'
                f'<text x="{x + 8}" y="{y + 36}" fill="{ink}">{q:.1%}</text></g>'
            )
    where = (
        f"★ layer {layer_labels[first_top]}: the first whose top guess it is."
        if first_top is not None
        else "No layer ranks it first."
    )
    foot = top + n * SVG_ROW
    parts.append(
        f'<text x="4" y="{foot + 22}" fill="{SUBTLE}">Outlined: “{esc(display_token(chosen_piece))}”, the '
        f"token taken; its probability and rank (#) at each layer beside the layer.</text>"
        f'<text x="4" y="{foot + 42}" fill="{SUBTLE}">{esc(where)}</text>'
    )
    return "".join(parts) + "</svg>"


def lens_figure(
    chosen_probs,
    top_pieces: Sequence[Sequence[str]],
    step_labels: Sequence[str],
    layer_labels: Sequence[str],
    title: str = "",
    width: int = PAGE_PX,
) -> go.Figure:
    """Every step so far: a heatmap of the taken token's probability at each layer, labelled with each layer's
    top guess.

    Args:
        chosen_probs: ``[layers, steps]`` probability (0–1) of the token taken at each step, per layer.
        top_pieces: ``[layers][steps]`` each layer's top guess at each step, as shown.
        step_labels: one label per step (the token taken: ``"3 ▁lebt"``); the columns.
        layer_labels: one per layer, first layer first; drawn bottom to top (the output on top).
        title: the figure's title.
        width: the chart's width (px) in the narrowest layout it is shown in; cells too narrow for their guess's
            text leave it to the hover.

    Returns:
        A Plotly figure: x = steps, y = layers, colour = probability on one 0–1 scale; hover "step · layer: top
        guess (p), p(token taken)".

    Raises:
        ValueError: when the labels or pieces do not fit ``chosen_probs``' shape.
    """
    z = np.asarray(chosen_probs, dtype=float)
    if (
        z.ndim != 2
        or z.shape != (len(layer_labels), len(step_labels))
        or [len(row) for row in top_pieces] != [z.shape[1]] * z.shape[0]
    ):
        raise ValueError(
            f"labels ({len(layer_labels)} layers, {len(step_labels)} steps) and pieces do not fit "
            f"probabilities of shape {z.shape}"
        )
    guesses = [[display_token(p) for p in row] for row in top_pieces]
    steps = [display_token(s) for s in step_labels]
    hover = np.array(
        [
            [
                f"step <b>{plotly_escape(steps[j])}</b> · layer {plotly_escape(layer_labels[i])}<br>"
                f"top guess <b>{plotly_escape(g)}</b>"
                for j, g in enumerate(row)
            ]
            for i, row in enumerate(guesses)
        ]
    )
    plot_w = width - 20 - COLORBAR_PX - AXIS_TITLE_PX - label_px(layer_labels, MIN_READABLE) - 10
    plan = label_plan(steps, max(plot_w, 1.0))
    cell_px = max(plot_w, 1.0) / max(z.shape[1], 1)
    longest = max((len(g) for row in guesses for g in row), default=0)
    text = np.array(guesses) if longest * 0.6 * MIN_READABLE + 6 <= cell_px else None
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(z.shape[1])),
            y=list(range(z.shape[0])),
            customdata=hover,
            zmin=0.0,
            zmax=1.0,
            colorscale=ATTENTION_SCALE,
            xgap=1,
            ygap=1,
            text=text,
            texttemplate="%{text}" if text is not None else None,
            textfont=dict(family=MONO, size=MIN_READABLE),
            hovertemplate="%{customdata}<br>p(token taken) %{z:.3f}<extra></extra>",
            colorbar=dict(title=dict(text="p(taken)"), thickness=14),
        )
    )
    title = wrap_title(title, title_chars(width)) if title else ""
    top = max(50, title_margin(title, 26, 24)) if title else 20
    row = max(34, LINE_EM * MIN_READABLE + 12)
    under = labels_depth(steps, plan) + 10 + AXIS_TITLE_PX + TITLE_STANDOFF
    fig.update_layout(
        title=_title(title),
        font=FONT,
        height=int(top + row * z.shape[0] + under + 10),
        margin=dict(l=10, r=10, t=top, b=10),
        plot_bgcolor=WHITE,
    )
    set_token_xaxes(fig, steps, plan, dict(family=MONO, color=INK), "step (token taken) →")
    fig.update_yaxes(**token_yaxis(list(layer_labels), MIN_READABLE, "decoder layer ↑"))
    return fig
