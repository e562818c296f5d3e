"""One look for every figure and HTML fragment: palette, font stacks, Plotly toolbar config, layout defaults.

Every colour and font the app draws with is named here once; figures in :mod:`viz` and the HTML the pages
write (``app_pages/``, ``ui/``) use these names instead of hex literals. No Streamlit, no model.
"""

from __future__ import annotations

import html
import math
from typing import NamedTuple, TypedDict


def escape_html(text: str) -> str:
    """``text`` safe inside the HTML a page draws with ``unsafe_allow_html``: ``&``, ``<``, ``>`` and quotes escaped
    (``html.escape``), and line breaks written as character references. Streamlit renders that HTML through
    Markdown, where a blank line ends an HTML block: a text with one ("a\\n\\nb") would turn the rest of the
    fragment, tags and the visitor's words alike, into Markdown. The browser still reads ``&#10;`` as a line break."""
    return html.escape(text).replace("\r", "&#13;").replace("\n", "&#10;")


# --- palette -------------------------------------------------------------------------------------------
INK = "#1b2a3a"  #: titles, tick labels, text on light backgrounds
MUTED = "#444444"  #: axis titles, secondary text
SUBTLE = "#555555"  #: captions, small notes, neutral markers
FAINT = "#8a8f98"  #: text that is context, not content (the source beside a translation)
NAVY = "#0b2545"  #: text on pale attention chips
BLUE = "#1d5fa3"  #: the main data colour (lines, bars, the "this model" series)
STEEL = "#3a87c0"  #: candidate bars and beam nodes that were not chosen
SKY = "#8fc1de"  #: a lighter companion of STEEL
PALE_BLUE = "#8fb8de"  #: the "all heads" baseline bars
ACCENT = "#e4572e"  #: the one thing to look at: chosen token, strongest key, open head
ACCENT_BG = "#fff7f3"  #: background of the highlighted output box
ACCENT_PALE = "#fde4dc"  #: background of the active token chip
GREY = "#c4c4c4"  #: pruned beams
BORDER = "#c9d6e3"  #: chip borders
CHIP_BG = "#f5f8fb"  #: inactive token chip background
GRID = "#eeeeee"  #: gridlines
ZERO_LINE = "#999999"  #: zero lines
MASKED_BG = "#e6e6e6"  #: plot background where a causal mask blanks cells
WHITE = "#ffffff"
DARK_TEXT = "#333333"  #: text inside light bars
PLACEHOLDER = "#6b7785"  #: "no data yet" notes inside an empty chart
AXIS_LINE = "#9aa5b1"  #: axis lines of the training charts
LIGHT_GRID = "#e3e7eb"  #: gridlines of the training charts
#: One colour per series (runs, curves): Okabe–Ito, colour-blind safe, strong ones first; yellow last, as it is
#: faint on white.
SERIES_PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")

# Teaching chips (BPE replay, RoPE rotation tables)
CHIP_COLOURS = ("#dbeafe", "#fde68a")  #: alternating piece backgrounds
HIGHLIGHT_BG = "#fde68a"  #: the cell being explained
CELL_BG = "#eef2f7"  #: other cells
CELL_BORDER = "#cbd5e1"
CHIP_BORDER = AXIS_LINE
EMPTY_BG = "#f3f4f6"  #: an empty span
ERROR_BG = "#fecaca"  #: a piece the vocabulary lacks
ERROR_BORDER = "#b91c1c"

#: A sequential scale on 0–1 that stays readable on a projector: white → deep blue, rising fast at low weights
#: so that 0.05–0.3 are visible, while one fixed range keeps heads comparable (a uniform head stays pale).
#: ``[stop, colour]`` lists, not tuples: plotly's ``sample_colorscale`` reads a tuple as one colour.
ATTENTION_SCALE: list[list[float | str]] = [
    [0.0, WHITE],
    [0.04, "#e3eef8"],
    [0.12, "#a9cde6"],
    [0.3, "#4f97c9"],
    [0.6, BLUE],
    [1.0, "#0b2f66"],
]
#: Worked examples' number matrices: light (smallest) to dark (largest), linear (the values are any reals, not
#: weights). Given as stops, not as Plotly's name "Blues": plotly.js reads that name as dark blue → light grey, the
#: reverse of the attention heatmap beside the matrices, where grey means "masked".
MATRIX_SCALE = [[0.0, "#f7fbff"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"], [1.0, "#08306b"]]
#: Font size of the numbers written in a matrix's cells (px): readable from the back of a room.
CELL_TEXT_PX = 14
#: "r,g,b" of the dark attention blue, for ``rgba(r,g,b,alpha)`` chip shading by weight.
ATTENTION_RGB = "11,61,128"

# --- fonts ---------------------------------------------------------------------------------------------
SANS = "Inter, Segoe UI, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"


class Font(TypedDict, total=False):
    """A Plotly font: ``family``, ``size`` (px), ``color``."""

    family: str
    size: int
    color: str


#: Plotly layout font of every figure (px).
FONT: Font = dict(family=SANS, size=15)
#: Figure titles (px).
TITLE_FONT: Font = dict(size=16, color=INK)
#: Axis titles (px); 14 px is the smallest size readable from the back of a lecture room.
AXIS_TITLE_FONT: Font = dict(size=14, color=MUTED)
#: Room (px) between an axis' tick labels and its title: Plotly's own default let turned token labels touch the
#: title ("keys (attended to) →"), so every token axis sets this (with ``automargin``, Plotly keeps it).
TITLE_STANDOFF = 14
#: Token pieces as tick labels or node labels (px).
TOKEN_FONT: Font = dict(family=MONO, size=14, color=INK)
#: The smallest font any figure uses for labels a class has to read (px).
MIN_READABLE = 14

# --- Plotly --------------------------------------------------------------------------------------------
#: Plotly toolbar: the camera button saves SVG (sharp on slides) instead of PNG.
PLOTLY_CONFIG = {"toImageButtonOptions": {"format": "svg", "scale": 1}, "displaylogo": False}


def title(text: str, size: int = 16) -> dict:
    """A left-aligned figure title in :data:`INK` (a Plotly ``layout.title`` dict)."""
    return dict(text=text, x=0.0, xanchor="left", font=dict(size=size, color=INK))


#: Width (px) of the page's content at 1280×720 with the sidebar open: what a full-width chart gets. Charts are
#: laid out for this, the narrowest screen they are shown on; on a wider one they only gain room.
PAGE_PX = 880
#: Width (px) of a chart in one of two columns at 1280×720.
HALF_PX = 430
#: Figures narrower than this (px) are laid out for a phone's screen (360 px of a 390 px one): panels share their
#: width otherwise, shorter panel titles, a colour bar's title beside it.
NARROW_PX = 400
#: Characters of a 16 px title that fit a half-width chart at 1280 px (:data:`HALF_PX`); Plotly never wraps a title.
TITLE_CHARS = 52


def title_chars(width_px: float, size: int = 16) -> int:
    """Characters of a ``size`` px title that fit a chart ``width_px`` wide (:data:`TITLE_CHARS` at
    :data:`HALF_PX` and 16 px)."""
    return max(12, int(TITLE_CHARS * (width_px / HALF_PX) * (16 / size)))


def wrap_title(text: str, limit: int = TITLE_CHARS) -> str:
    """``text`` broken into lines of at most ``limit`` characters with ``<br>``, at ``" · "``, ``" ("`` or a space.

    A line break goes before the separator's second part (``"A · B"`` → ``"A ·<br>B"``; ``"A (b)"`` → ``"A<br>(b)"``);
    a word longer than ``limit`` stays whole. Text that fits is returned unchanged.
    """
    lines, rest = [], text
    while len(rest) > limit:
        dot, paren, space = rest.rfind(" · ", 0, limit - 1), rest.rfind(" (", 0, limit), rest.rfind(" ", 0, limit + 1)
        cut = dot + 2 if dot > 0 else paren if paren > 0 else space
        if cut <= 0:
            break
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    return "<br>".join(lines + [rest])


def title_margin(text: str, base: int = 24, line: int = 24) -> int:
    """Top margin (px) that fits a title of ``text``'s lines (``<br>``-separated); ``base`` alone for no title."""
    return base + line * (text.count("<br>") + 1) if text else base


#: Width of one character of a monospace token label, as a share of its font size (a monospace glyph is 0.6 em).
MONO_CHAR_EM = 0.6
#: Distance two neighbouring upright (or stacked level) labels need between their ticks: a line, as a share of
#: the font size.
LINE_EM = 1.3


def tick_plan(labels, axis_px: float, size: int = MIN_READABLE) -> tuple[int, int]:
    """How to write ``labels`` (one per cell, monospace, ``size`` px) along an axis ``axis_px`` long without
    overlaps: ``(angle, every)``. Level (0°) when the longest label fits its cell; else upright (−90°, read from
    below), keeping every ``every``-th label (1 = all) so that neighbours stay a line (:data:`LINE_EM`) apart.

    Slanted labels are never planned: at −45° two neighbours still need a line between their ticks divided by
    sin 45°, more room than upright ones, and they take more room under the axis than level ones.

    Raises:
        ValueError: ``axis_px`` is not positive.
    """
    labels = list(labels)
    if _cell(labels, axis_px, size)[1]:
        return 0, 1
    return -90, stacked_every(len(labels), axis_px, size)


def _cell(labels: list, axis_px: float, size: int) -> tuple[float, bool]:
    """``(cell, level)``: the room (px) each of ``labels`` has along an axis ``axis_px`` long, and whether the longest
    fits it written level at ``size`` px (with 8 px between neighbours).

    Raises:
        ValueError: ``axis_px`` is not positive.
    """
    if axis_px <= 0:
        raise ValueError(f"axis_px must be positive, got {axis_px}")
    cell = axis_px / max(len(labels), 1)
    return cell, max((len(str(t)) for t in labels), default=0) * MONO_CHAR_EM * size + 8 <= cell


#: The smallest size (px) a token label shrinks to before its labels are spread over more tiers.
SMALL_TOKEN = 11
#: At most this many tiers of upright labels along one axis (:func:`label_plan`).
MAX_TIERS = 3
#: Presentation mode (``ui.presentation``) draws a figure's labels up to this much larger: the room between tiers of
#: labels is laid out for the larger ones, so that an enlarged first tier does not run into the second.
ENLARGED = 1.3
#: Room (px) between the end of one tier's labels and the start of the next tier's.
TIER_GAP = 8


class LabelPlan(NamedTuple):
    """How to write one label per cell along an axis (:func:`label_plan`).

    Attributes:
        angle: 0 (level) or −90 (upright, read from below).
        tiers: upright labels take turns over this many tiers (label ``i`` in tier ``i % tiers``), each tier
            further from the axis than the one before, so that neighbours in one tier are ``tiers`` cells apart.
        size: the font size (px) the labels fit at.
        fits: ``False`` when even :data:`MAX_TIERS` tiers at :data:`SMALL_TOKEN` px overlap: the chart needs
            more room (the caller lays it out wider).
    """

    angle: int
    tiers: int
    size: int
    fits: bool = True


def label_plan(
    labels, axis_px: float, size: int = MIN_READABLE, smallest: int = SMALL_TOKEN, max_tiers: int = MAX_TIERS
) -> LabelPlan:
    """How to write *every one* of ``labels`` (one per cell, monospace) along an axis ``axis_px`` long, none
    left out and none overlapping: level at ``size`` px when the longest fits its cell; else upright, in as few
    tiers as possible (1, 2, … ``max_tiers``), at the largest size from ``size`` down to ``smallest`` that keeps
    neighbours of a tier a line (:data:`LINE_EM`) apart. A label left out cannot be read from a projector (hover
    is no help there), so a long sentence gets smaller type or a second tier, never every other label.

    Raises:
        ValueError: ``axis_px`` is not positive.
    """
    cell, level = _cell(list(labels), axis_px, size)
    if level:
        return LabelPlan(0, 1, size)
    for tiers in range(1, max(1, max_tiers) + 1):
        for s in range(size, min(size, smallest) - 1, -1):
            if LINE_EM * s <= tiers * cell:
                return LabelPlan(-90, tiers, s)
    return LabelPlan(-90, max(1, max_tiers), min(size, smallest), fits=False)


def tier_px(labels, size: int) -> float:
    """Depth (px) of one tier of upright ``labels`` at ``size`` px under an axis: the longest label, drawn as large
    as presentation mode may draw it (:data:`ENLARGED`), and :data:`TIER_GAP`."""
    return max((len(str(t)) for t in labels), default=0) * MONO_CHAR_EM * size * ENLARGED + TIER_GAP


def stacked_every(n: int, axis_px: float, size: int = MIN_READABLE) -> int:
    """Every how many of ``n`` one-line labels, ``size`` px, stacked along an axis ``axis_px`` long (a heatmap's
    rows, or upright labels side by side) can be written so that neighbours stay a line apart (1 = all)."""
    cell = axis_px / max(n, 1)
    return max(1, int(math.ceil(LINE_EM * size / cell - 1e-9))) if cell > 0 else max(1, n)


def thinned(n: int, every: int, keep_last: bool = False) -> list[int]:
    """The positions of ``n`` labels kept when every ``every``-th is written: from the first (``0, every, …``), or
    counted back from the last (``keep_last``: the newest position of a growing sequence stays labelled)."""
    every = max(1, int(every))
    return list(range(n - 1, -1, -every))[::-1] if keep_last else list(range(0, n, every))


def legend_above(y: float = 1.02) -> dict:
    """A horizontal legend just above the plot area, right-aligned, so that it never covers an axis title."""
    return dict(orientation="h", yanchor="bottom", y=y, xanchor="right", x=1.0)


#: Room under the plot for the x tick labels and the x-axis title (px), below which a bottom legend starts.
AXIS_ROOM = 64
#: Height of one legend row (px) at :data:`MIN_READABLE`.
LEGEND_ROW = 26


def legend_rows(names, width: int = 600, size: int = MIN_READABLE) -> int:
    """Rows a horizontal legend of ``names`` needs in ``width`` px (each entry: its symbol, ~0.6 em a character)."""
    rows, used = 1, 0.0
    for name in names:
        entry = 50 + 0.6 * size * len(str(name))
        if used and used + entry > width:
            rows, used = rows + 1, 0.0
        used += entry
    return rows


def legend_below(names, width: int = 600) -> tuple[dict, int]:
    """A horizontal legend at the very bottom of the figure, under the x-axis title rather than on it.

    Returns ``(legend, bottom_margin)``: the legend dict (anchored to the figure, not the plot) and the bottom
    margin (px) that keeps :data:`AXIS_ROOM` for the tick labels and axis title above it.
    """
    rows = legend_rows(names, width)
    legend = dict(
        orientation="h", yref="container", y=0.0, yanchor="bottom", xanchor="left", x=0.0, font=dict(size=MIN_READABLE)
    )
    return legend, AXIS_ROOM + LEGEND_ROW * rows


# --- building a figure -----------------------------------------------------------------------------------
#: Set (to anything but "" or "0") to have :func:`figure` check every property (the test suite does, so every
#: figure the tests build is validated once, while the server skips it).
VALIDATE_ENV = "ATTENTION_EXPLORER_VALIDATE_FIGURES"


def figure(data: list[dict], layout: dict):
    """A Plotly figure from plain ``data`` (trace dicts with their ``type``) and ``layout`` dicts, built in one go.

    Plotly validates every property it is given, and a figure assembled by ``update_layout`` / ``add_trace`` calls
    walks its property tree again at each call: an attention heatmap took 28 ms to build that way and the model grid
    0.6 s, at every click of every visitor of a page, under the server's one interpreter lock. Built here from
    dicts without validation it takes ~1 ms; validation is on where :data:`VALIDATE_ENV` is set (the tests).
    """
    import os

    import plotly.graph_objects as go

    check = os.environ.get(VALIDATE_ENV, "") not in ("", "0")
    return go.Figure({"data": data, "layout": layout}, _validate=check)
