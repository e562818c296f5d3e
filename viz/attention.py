"""Attention weights drawn: the Plotly heatmap of one head, and the HTML views a click redraws without Plotly (the
alignment grid, weight chips, token chips). Pure functions from weight arrays and token labels; no Streamlit.

Convention on every chart: **rows = queries (the token doing the looking), columns = keys (the tokens looked
at)**; each row sums to 1. Axes are numeric positions with the pieces as tick labels, so a sentence with the
same word twice keeps two rows. Pieces arrive as the page shows them; how they are written is
:mod:`viz.token_labels`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale, unlabel_rgb

from viz.theme import (
    ACCENT,
    ACCENT_PALE,
    ATTENTION_RGB,
    ATTENTION_SCALE,
    BORDER,
    CHIP_BG,
    FONT,
    GREY,
    HALF_PX,
    INK,
    LINE_EM,
    MASKED_BG,
    MIN_READABLE,
    MONO,
    MONO_CHAR_EM,
    NARROW_PX,
    NAVY,
    SUBTLE,
    TITLE_STANDOFF,
    WHITE,
    LabelPlan,
    escape_html,
    figure,
    label_plan,
    title_chars,
    title_margin,
    wrap_title,
)
from viz.theme import title as _title
from viz.token_labels import (
    AXIS_TITLE_PX,
    display_token,
    hover_axes_into,
    label_px,
    labels_depth,
    shorten,
    token_xaxes_into,
    token_yaxis,
)

#: The dtype of every weight a chart carries: the model computes in float32, and a chart shows three decimals.
#: Plotly sends a NumPy array as its raw bytes (base64), so float64 doubled every figure for nothing: the 36-panel
#: grid of a 128-piece sentence is 3.4 MB of JSON in float32 against 7.4 MB, its serialisation on a page run
#: (``plotly.io.to_json`` and Streamlit's hash of the result) peaks at 17 MB against 33 MB and takes half the time,
#: and the shared figures' byte budget holds twice as many.
CHART_DTYPE = np.float32


def causal_blank(z: np.ndarray) -> np.ndarray:
    """A copy of ``z [..., q_len, k_len]`` (as :data:`CHART_DTYPE`) with the masked future (keys after each query)
    set to NaN, so that charts draw it as empty rather than as a weight of zero. Queries are the last ``q_len``
    positions."""
    q_len, k_len = z.shape[-2:]
    z = np.array(z, dtype=CHART_DTYPE, copy=True)
    z[..., np.triu(np.ones((q_len, k_len), dtype=bool), k=1 + k_len - q_len)] = np.nan
    return z


def as_array(weights) -> np.ndarray:
    """``weights`` (a tensor or anything :func:`numpy.asarray` reads) as a :data:`CHART_DTYPE` array of the same
    shape (a copy)."""
    arr = weights.detach().cpu().numpy() if hasattr(weights, "detach") else np.asarray(weights)
    return arr.astype(CHART_DTYPE)


def check_labels(shape: tuple[int, ...], q_labels: Sequence[str], k_labels: Sequence[str]) -> None:
    """Raise ``ValueError`` unless there is one query label per row and one key label per column of ``shape``
    (``[..., q_len, k_len]``)."""
    if len(q_labels) != shape[-2] or len(k_labels) != shape[-1]:
        raise ValueError(f"labels ({len(q_labels)}, {len(k_labels)}) do not fit weights {shape}")


#: Room (px) a heatmap's colour bar takes at its right: the bar, its numbers and its title ("weight").
COLORBAR_PX = 80


def key_plan(
    query_labels: Sequence[str], key_labels: Sequence[str], width: float, colorbar_px: float = COLORBAR_PX
) -> LabelPlan:
    """How a heatmap ``width`` px wide writes its key labels (:func:`viz.theme.label_plan`), less the room its
    colour bar (``colorbar_px``), axis title and query labels take (labels as shown: :func:`display_token`,
    shortened)."""
    q_short = [shorten(display_token(t)) for t in query_labels]
    plot_w = width - 20 - colorbar_px - AXIS_TITLE_PX - label_px(q_short, MIN_READABLE) - 10
    return label_plan([shorten(display_token(t)) for t in key_labels], max(plot_w, 1.0))


def heatmap_fits(query_labels: Sequence[str], key_labels: Sequence[str], width: float) -> bool:
    """Whether :func:`attention_heatmap` ``width`` px wide can write every key label without overlaps (at
    :data:`viz.theme.SMALL_TOKEN` px in :data:`viz.theme.MAX_TIERS` tiers at most); where it cannot, a page draws
    the map wider (one per row instead of two)."""
    return key_plan(query_labels, key_labels, width).fits


def attention_heatmap(
    weights,
    query_labels: Sequence[str],
    key_labels: Sequence[str],
    title: str = "",
    causal: bool = False,
    height: int | None = None,
    zmax: float | None = 1.0,
    width: int = HALF_PX,
) -> go.Figure:
    """One head (or an aggregate) as a heatmap.

    Args:
        weights: ``[q_len, k_len]`` attention weights (tensor or array), rows = queries.
        query_labels / key_labels: BPE pieces of the rows / columns.
        causal: blank the masked upper triangle (keys after the query) instead of drawing it as zero: a masked
            cell is empty, and the plot's background (:data:`~viz.theme.MASKED_BG`) shows through, the same grey in
            every row, ``<bos>``'s included (no axis line is drawn behind the cells, where it would show).
        height: the figure's height (px) at least; it grows until every query row has room for its label.
        zmax: colour-scale maximum (1.0 keeps every chart on one scale; ``None`` = the largest weight shown).
        width: the chart's width (px) in the narrowest layout it is shown in (:data:`~viz.theme.HALF_PX`: one of
            two columns at 1280×720; :data:`~viz.theme.PAGE_PX`: the page's width). The title is wrapped and
            every key is labelled (:func:`viz.theme.label_plan`: smaller type or a second tier of labels where they
            would not fit) for it; :func:`heatmap_fits` says whether they can be at this width.

    Returns:
        A Plotly figure whose hover reads "query → key: weight".
    """
    w = as_array(weights)
    q_len, k_len = w.shape
    check_labels(w.shape, query_labels, key_labels)
    z = causal_blank(w) if causal else w.copy()
    q_disp = [display_token(t) for t in query_labels]
    k_disp = [display_token(t) for t in key_labels]
    data = [
        dict(
            type="heatmap",
            z=z,
            x=list(range(k_len)),
            y=list(range(q_len)),
            colorscale=ATTENTION_SCALE,
            zmin=0.0,
            zmax=zmax if zmax is not None else (float(np.nanmax(z)) if np.isfinite(z).any() else 1.0) or 1.0,
            xgap=1,
            ygap=1,
            # on a phone's narrow chart the title above the bar ran into its top number: beside the bar there
            colorbar=dict(title=dict(text="weight", side="right" if width < NARROW_PX else "top"), thickness=14),
        )
    ]
    title = wrap_title(title, title_chars(width)) if title else ""
    top = max(50, title_margin(title, 26, 24)) if title else 20
    q_short, k_short = [shorten(t) for t in q_disp], [shorten(t) for t in k_disp]
    plan = key_plan(q_short, k_short, width)
    # every query row keeps its label: a row is at least a line of the labels' type, and the figure grows to hold
    # them (a long sentence gives a tall chart, never every other label)
    row = max(34 if max(q_len, k_len) <= 20 else 22, LINE_EM * plan.size + 2)
    under = labels_depth(k_short, plan) + 10 + AXIS_TITLE_PX + TITLE_STANDOFF
    height = max(height or 0, int(top + row * q_len + under + 10))
    layout = dict(
        title=_title(title),
        font=FONT,
        height=height,
        margin=dict(l=10, r=10, t=top, b=10),
        plot_bgcolor=MASKED_BG if causal else WHITE,
    )
    # No zero lines: they are drawn under the cells and showed through every empty (masked) cell of the first
    # row and column, and through the gaps between cells, as a dark line across the <bos> row.
    tick_font = dict(family=MONO, size=plan.size, color=INK)
    token_xaxes_into(data, layout, k_short, plan, tick_font, "keys (attended to) →")
    layout["yaxis"] = dict(token_yaxis(q_short, plan.size, "queries (attending) ↓"), autorange="reversed")
    data[0]["hovertemplate"] = hover_axes_into(data, layout, q_disp, k_disp) + "<br>weight %{z:.3f}<extra></extra>"
    return figure(data, layout)


def scale_colours(values, scale: Sequence[Sequence] = ATTENTION_SCALE) -> list[str]:
    """The colours (``"#rrggbb"``) of ``values`` (any shape, read flat; clipped to 0–1, NaN counts as 0) on a
    Plotly colour ``scale`` of ``[position, "#rrggbb"]`` stops, sampled by Plotly itself
    (``plotly.colors.sample_colorscale``), so that HTML views match the heatmaps' colours."""
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=float).reshape(-1), nan=0.0), 0.0, 1.0)
    return (
        ["#%02x%02x%02x" % tuple(round(c) for c in unlabel_rgb(rgb)) for rgb in sample_colorscale(scale, v.tolist())]
        if v.size
        else []
    )


#: Height of a row of :func:`alignment_html`, px: one line of a 14 px label with a little air.
ALIGN_ROW_PX = 24
#: Width (px) of the narrowest place :func:`alignment_html` is shown in at 1280×720: the Translate page's right
#: column with the sidebar open (~410 px), the Decoding lab's probabilities tab (~390 px).
ALIGN_PX = 390
#: Width of the row-label column of :func:`alignment_html`, in em of its 14 px labels.
ALIGN_ROW_HEAD_EM = 7.5


def alignment_html(
    weights,
    target_labels: Sequence[str],
    source_labels: Sequence[str],
    title: str = "",
    current: int | None = -1,
    width: int = ALIGN_PX,
) -> str:
    """Cross-attention as a translation alignment, drawn as an HTML grid (one row per generated piece, one column
    per source piece, each cell shaded on :data:`~viz.theme.ATTENTION_SCALE` from 0 to 1, hover = the weight).

    An HTML grid rather than a Plotly heatmap: the Translate step view redraws it on every click, and a page
    without Plotly loads ~3 s sooner on a busy 2-core machine. Labels are 14 px or more, and every source piece
    is written whole: where the columns of a grid ``width`` px wide are narrower than a line, the upright labels
    take turns over two or three tiers (:func:`viz.theme.label_plan`; a pale leader line joins a lower tier's
    label to its column), and where even three tiers would not fit, the grid is drawn wider and scrolls sideways.

    Args:
        weights: ``[steps, src_len]`` cross-attention weights (tensor or array), rows = generated pieces.
        target_labels / source_labels: BPE pieces of the rows / columns.
        title: a heading above the grid ('' for none).
        current: the row outlined as the newest token (``-1`` = the last, ``None`` = none).
        width: the grid's width (px) in the narrowest layout it is shown in (default :data:`ALIGN_PX`).

    Returns:
        An HTML fragment (every piece escaped); each cell carries its weight in ``data-w``, each column label its
        tier in ``data-tier`` (0 = next to the grid).

    Raises:
        ValueError: when the labels do not fit the weights' shape.
    """
    w = as_array(weights)
    check_labels(w.shape, target_labels, source_labels)
    n_rows = w.shape[0]
    current = n_rows + current if current is not None and current < 0 else current
    shown = [display_token(k) for k in source_labels]
    head_px = ALIGN_ROW_HEAD_EM * MIN_READABLE
    plan = label_plan(shown, max(width - head_px, 1.0), MIN_READABLE, smallest=MIN_READABLE)
    tiers = plan.tiers if plan.angle else 1
    # where even the last tier is too crowded, every column gets its share of a line and the grid scrolls sideways
    min_col = LINE_EM * MIN_READABLE / tiers
    depth_em = max((len(t) for t in shown), default=0) * MONO_CHAR_EM + 0.6  # one tier of labels, in em
    # Streamlit's markdown styles tables (borders, padding, stripes): every cell says its own.
    label = f"font-family:{MONO};font-size:14px;color:{INK};font-weight:400;white-space:nowrap;border:0;background:none"
    head = "".join(
        f'<th class="ae-align-col" data-tier="{j % tiers}" style="{label};vertical-align:bottom;padding:0 0 4px 0;'
        f'overflow:visible"><div style="display:flex;flex-direction:column;align-items:center">'
        f'<div style="writing-mode:vertical-rl;transform:rotate(180deg);line-height:1.15">{escape_html(k)}</div>'
        + (
            f'<div style="width:1px;height:{(j % tiers) * depth_em:.2f}em;background:{GREY}"></div>'
            if j % tiers
            else ""
        )
        + "</div></th>"
        for j, k in enumerate(shown)
    )
    colours = np.array(scale_colours(w), dtype=object).reshape(w.shape)  # one call: per cell was 8x slower
    rows = []
    for i, (q, row) in enumerate(zip(target_labels, w, strict=True)):
        q_disp = escape_html(display_token(q))
        newest = i == current
        cells = "".join(
            f'<td data-w="{x:.4f}" title="{q_disp} → {escape_html(k)}: {x:.3f}" '
            f'style="background:{colour};border:0;padding:0;border-radius:2px"></td>'
            for k, x, colour in zip(shown, np.nan_to_num(row), colours[i], strict=True)
        )
        mark = f"border-right:4px solid {ACCENT};font-weight:700" if newest else f"border-right:4px solid {WHITE}"
        rows.append(
            f'<tr style="height:{ALIGN_ROW_PX}px"><th class="ae-align-row" style="{label};text-align:right;'
            f'padding:0 8px 0 0;{mark}">{q_disp}</th>{cells}</tr>'
        )
    stops = ", ".join(f"{c} {100 * float(p):.0f}%" for p, c in ATTENTION_SCALE)
    legend = (
        f'<div class="ae-align-legend" style="display:flex;flex-wrap:wrap;justify-content:space-between;'
        f'align-items:center;gap:4px 12px;margin-top:6px;font-size:14px;color:{SUBTLE}">'
        f"<span>rows: generated · columns: source</span>"
        f'<span style="display:flex;align-items:center;gap:6px">weight 0<span style="width:110px;height:12px;'
        f'border:1px solid {BORDER};background:linear-gradient(to right, {stops})"></span>1</span></div>'
    )
    heading = (
        f'<div class="ae-align-title" style="font-weight:600;font-size:1.05rem;color:{INK};margin-bottom:4px">'
        f"{escape_html(title)}</div>"
        if title
        else ""
    )
    min_width = head_px + min_col * len(shown)
    return (
        f'<div class="ae-align">{heading}<div style="overflow-x:auto"><table style="width:100%;'
        f'min-width:{min_width:.0f}px;table-layout:fixed;border-collapse:separate;border-spacing:2px;margin:0">'
        f'<colgroup><col style="width:{ALIGN_ROW_HEAD_EM}em">{"<col>" * len(shown)}</colgroup>'
        f'<thead><tr><th style="border:0;background:none"></th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{legend}</div>"
    )


def highlight_tokens_html(tokens: Sequence[str], weights, caption: str = "") -> str:
    """The pieces as inline chips shaded by ``weights`` (``[len(tokens)]``, 0–1, relative to the largest), each
    with its weight; the strongest is outlined.

    Weights are written with 2 decimals, or 3 when the largest is under 0.05 (a column of small weights read
    all "0.00" before). When even the largest rounds to 0 at that precision, nothing is outlined and the
    caption says so. Returns an HTML fragment (safe: every piece is escaped).
    """
    w = np.nan_to_num(as_array(weights).reshape(-1))
    if len(w) != len(tokens):
        raise ValueError("one weight per token is needed")
    peak = float(w.max()) if len(w) else 0.0
    places = 2 if peak >= 0.05 else 3
    top = int(np.argmax(w)) if len(w) and round(peak, places) > 0 else -1
    chips = []
    for i, (tok, weight) in enumerate(zip(tokens, w, strict=True)):
        alpha = 0.08 + 0.92 * (weight / peak if peak > 0 else 0.0)
        color = WHITE if alpha > 0.55 else NAVY
        border = f"3px solid {ACCENT}" if i == top else f"1px solid {BORDER}"
        chips.append(
            f'<span title="weight {weight:.4f}" style="display:inline-block;margin:3px 2px;padding:4px 8px;'
            f"border-radius:6px;border:{border};background:rgba({ATTENTION_RGB},{alpha:.2f});color:{color};"
            f'font-size:1.15rem;font-family:monospace">{escape_html(display_token(tok))}'
            f'<sub style="font-size:0.8rem;margin-left:4px">{weight:.{places}f}</sub></span>'
        )
    if top < 0 and len(w):
        caption = (caption + " — " if caption else "") + f"every weight is below {0.5 * 10**-places:g}"
    elif places == 3:
        caption = (caption + " — " if caption else "") + f"the largest weight is only {peak:.3f}"
    cap = f'<div style="color:{SUBTLE};font-size:0.9rem;margin-top:2px">{escape_html(caption)}</div>' if caption else ""
    return f'<div style="line-height:2.2">{"".join(chips)}</div>{cap}'


def tokens_html(tokens: Sequence[str], current: int | None = None) -> str:
    """Generated pieces as chips; the one at index ``current`` is highlighted (the token just produced)."""
    chips = []
    for i, tok in enumerate(tokens):
        active = i == current
        chips.append(
            f'<span style="display:inline-block;margin:3px 2px;padding:4px 8px;border-radius:6px;'
            f"font-size:1.15rem;font-family:monospace;border:1px solid {ACCENT if active else BORDER};"
            f'background:{ACCENT_PALE if active else CHIP_BG}">{escape_html(display_token(tok))}</span>'
        )
    return f'<div style="line-height:2.2">{"".join(chips) or "<i>nothing yet</i>"}</div>'
