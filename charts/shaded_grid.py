"""The shaded HTML grid the attribution views draw: rows × columns of cells shaded on the attention colour scale
(0–1), the columns in groups with a gap between them (the source's pieces, then the prefix's), every column label
written (level, or upright over tiers), an outlined cell per row, a marked row, and a legend with the scale.

HTML rather than Plotly: the Translate page redraws these on a click and loads no Plotly. No Streamlit, no model.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from viz.attention import scale_colours
from viz.theme import (
    ACCENT,
    ATTENTION_SCALE,
    BORDER,
    GREY,
    INK,
    LINE_EM,
    MIN_READABLE,
    MONO,
    MONO_CHAR_EM,
    SANS,
    SUBTLE,
    WHITE,
    escape_html,
    label_plan,
)

#: Width (px) of the narrowest place the grids are shown in at 1280×720: the Translate page's right column with
#: the sidebar open.
GRID_PX = 390
#: The row labels' column, in em of the grid's font.
ROW_HEAD_EM = 8.0
#: Room (px) between the source's columns and the prefix's.
GAP_PX = 10
#: A cell's share from which its text turns white: the scale's blue is dark enough there.
WHITE_TEXT_FROM = 0.45


def grid_sizes(large: bool) -> tuple[int, int]:
    """``(label px, row px)``: presentation mode draws the grids larger."""
    return (MIN_READABLE + 2, 30) if large else (MIN_READABLE, 26)


def _column_heads(labels: list[str], groups: list[int], width: float, px: int) -> str:
    """The header cells of the columns: every label written, level where it fits, else upright over as many tiers
    as it takes (:func:`viz.theme.label_plan`), a pale leader joining a lower tier's label to its column."""
    head_px = ROW_HEAD_EM * px + GAP_PX * (len(set(groups)) - 1)
    plan = label_plan(labels, max(width - head_px, 1.0), px, smallest=px)
    tiers = plan.tiers if plan.angle else 1
    depth_em = max((len(t) for t in labels), default=0) * MONO_CHAR_EM + 0.6
    style = (
        f"font-family:{MONO};font-size:{px}px;color:{INK};font-weight:400;white-space:nowrap;border:0;"
        "background:none;padding:0 0 4px 0;overflow:visible"
    )
    cells, last = [], groups[0] if groups else 0
    for j, (label, group) in enumerate(zip(labels, groups, strict=True)):
        if group != last:
            cells.append('<th style="border:0;background:none"></th>')
            last = group
        text = escape_html(label)
        if not plan.angle:
            cells.append(
                f'<th class="ae-attr-col" data-tier="0" style="{style};text-align:center;'
                f'vertical-align:bottom">{text}</th>'
            )
            continue
        leader = (
            f'<div style="width:1px;height:{(j % tiers) * depth_em:.2f}em;background:{GREY}"></div>'
            if j % tiers
            else ""
        )
        cells.append(
            f'<th class="ae-attr-col" data-tier="{j % tiers}" style="{style};vertical-align:bottom">'
            f'<div style="display:flex;flex-direction:column;align-items:center"><div style="writing-mode:'
            f'vertical-rl;transform:rotate(180deg);line-height:1.15">{text}</div>{leader}</div></th>'
        )
    return "".join(cells)


def shaded_grid(
    row_labels: Sequence[str],
    labels: list[str],
    groups: list[int],
    group_names: Sequence[str],
    shades: np.ndarray,
    hovers: list[list[str]],
    marks: list[list[str]],
    outlined: Sequence[int | None],
    current: int | None,
    title: str,
    legend: str,
    large: bool,
    width: float,
    kind: str,
) -> str:
    """A rows × columns HTML grid shaded on :data:`~viz.theme.ATTENTION_SCALE` (``shades`` ``[rows, columns]`` in
    0–1), the columns in ``groups`` (an index into ``group_names`` per column) with a gap between groups.

    ``hovers`` / ``marks``: a hover text and a text written in each cell; ``outlined``: the column outlined in each
    row (or ``None``); ``current``: the row marked in the accent colour; ``legend``: HTML under the grid (e.g.
    :func:`scale_legend`); ``large``: presentation mode's sizes (:func:`grid_sizes`); ``width``: the narrowest
    width (px) it is shown in, for the column labels' layout; ``kind``: its CSS class, ``ae-{kind}``. Returns an
    HTML fragment, every text escaped."""
    px, row_px = grid_sizes(large)
    colours = np.array(scale_colours(shades), dtype=object).reshape(shades.shape)
    n_groups = max(groups, default=0) + 1
    cols = [f'<col style="width:{ROW_HEAD_EM}em">']
    names = ['<th style="border:0;background:none"></th>']
    for g in range(n_groups):
        span = groups.count(g)
        if g:
            cols.append(f'<col style="width:{GAP_PX}px">')
            names.append('<th style="border:0;background:none"></th>')
        cols.extend(["<col>"] * span)
        names.append(
            f'<th colspan="{span}" style="border:0;border-bottom:2px solid {BORDER};background:none;'
            f"color:{SUBTLE};font-weight:600;font-size:{px}px;text-align:center;padding:0 0 2px 0;"
            f'white-space:nowrap;overflow:visible">{escape_html(group_names[g])}</th>'
        )
    cell = "border:0;padding:0;border-radius:2px;text-align:center;vertical-align:middle;"
    rows = []
    for i, label in enumerate(row_labels):
        mark = f"border-right:4px solid {ACCENT};font-weight:700" if i == current else f"border-right:4px solid {WHITE}"
        parts = [
            f'<th class="ae-attr-row" style="font-family:{SANS};font-size:{px}px;color:{INK};border:0;'
            f'background:none;text-align:right;padding:0 8px 0 0;line-height:1.15;font-weight:400;{mark}">'
            f"{escape_html(label)}</th>"
        ]
        for j in range(len(labels)):
            if j and groups[j] != groups[j - 1]:
                parts.append('<td style="border:0;background:none"></td>')
            ring = f"box-shadow:inset 0 0 0 3px {ACCENT};" if outlined[i] == j else ""
            ink = WHITE if shades[i, j] >= WHITE_TEXT_FROM else INK
            parts.append(
                f'<td data-v="{shades[i, j]:.4f}" title="{escape_html(hovers[i][j])}" style="{cell}{ring}'
                f'background:{colours[i, j]};color:{ink};font-size:{px}px">{escape_html(marks[i][j])}</td>'
            )
        rows.append(f'<tr style="height:{row_px}px">{"".join(parts)}</tr>')
    heading = (
        f'<div style="font-weight:600;font-size:1.05rem;color:{INK};margin-bottom:4px">{escape_html(title)}</div>'
        if title
        else ""
    )
    min_width = ROW_HEAD_EM * px + (n_groups - 1) * GAP_PX + len(labels) * LINE_EM * px / 3
    group_row = f"<tr>{''.join(names)}</tr>" if any(group_names) else ""
    return (
        f'<div class="ae-{kind}">{heading}<div style="overflow-x:auto"><table style="width:100%;'
        f'min-width:{min_width:.0f}px;table-layout:fixed;border-collapse:separate;border-spacing:2px;margin:0">'
        f'<colgroup>{"".join(cols)}</colgroup><thead>{group_row}<tr><th style="border:0;background:none"></th>'
        f"{_column_heads(labels, groups, width, px)}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        f'<div class="ae-{kind}-legend" style="display:flex;flex-wrap:wrap;align-items:center;gap:4px 12px;'
        f'margin-top:6px;font-size:{px}px;color:{SUBTLE}">{legend}</div></div>'
    )


def scale_legend(low: str, high: str) -> str:
    """A legend entry (HTML): the attention colour scale as a bar from ``low`` to ``high`` (both escaped)."""
    stops = ", ".join(f"{c} {100 * float(p):.0f}%" for p, c in ATTENTION_SCALE)
    return (
        f'<span style="display:flex;align-items:center;gap:6px">{escape_html(low)}<span style="width:110px;'
        f'height:12px;border:1px solid {BORDER};background:linear-gradient(to right, {stops})"></span>'
        f"{escape_html(high)}</span>"
    )
