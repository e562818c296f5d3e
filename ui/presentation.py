"""Presentation mode: the app readable from the back of a lecture room.

A sidebar toggle, kept in the link as ``?present=1``, that gives larger fonts for tokens and in every figure
(axis labels of at least :data:`MIN_TICK` px), tables as HTML with :data:`TABLE_PX` px text
(:func:`ui.widgets.show_table`), captions in full contrast and the sidebar collapsed.

The mode belongs to one browser session: it lives in ``st.session_state`` (the toggle's key), never in a module
global, since every Streamlit session shares this module. Pages draw their figures through
:func:`ui.widgets.show_figure`, which enlarges a *copy* of the figure (a figure may be cached and shared by
other sessions) when :func:`is_on`.
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ui import url
from ui.page_state import APP
from viz.theme import BORDER, CHIP_BG, INK, MIN_READABLE

KEY = APP.present.key  #: session-state key of the toggle
PARAM = "present"  #: query parameter (declared with it)
#: Smallest font of any axis tick label or axis title in presentation mode (px).
MIN_TICK = max(16, MIN_READABLE)
SCALE = 1.25  #: fonts of figures grow by this factor (and to at least MIN_TICK)
#: Text of tables in presentation mode (px; :func:`ui.widgets.show_table` draws them as HTML there).
TABLE_PX = MIN_TICK + 2

#: Lines of output the output box shows in presentation mode before it scrolls (its type is larger).
PRESENT_OUTPUT_LINES = 2
#: Extra CSS in presentation mode. Token chips and the notes under them carry inline styles (viz/ writes HTML
#: fragments), hence the attribute selectors and ``!important``; the browser rewrites an inline style (colours
#: as ``rgb(…)``, a space after each colon), so the selectors match words, not the source's spelling.
CSS = f"""<style>
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li {{font-size: 1.12rem;}}
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p {{
  color: {INK} !important; opacity: 1 !important; font-size: 1.02rem !important;}}
[data-testid="stMarkdownContainer"] span[style*="monospace"] {{font-size: 1.45rem !important;}}
[data-testid="stMarkdownContainer"] span[style*="monospace"] sub {{font-size: 0.95rem !important;}}
[data-testid="stMain"] [data-testid="stMarkdownContainer"] div[style*="color"] {{color: {INK} !important;}}
[data-testid="stMain"] [data-testid="stMarkdownContainer"] div[style*="0.9rem"] {{font-size: 1.02rem !important;}}
[data-testid="stWidgetLabel"] p {{font-size: 1.05rem !important;}}
[data-testid="stMain"] input, [data-testid="stMain"] textarea,
[data-testid="stMain"] [data-baseweb="select"] div {{font-size: 1.05rem;}}
.ae-output {{font-size: 2rem !important;}}
.ae-output-text {{max-height: {PRESENT_OUTPUT_LINES * 1.35}em !important;}}
.ae-topk-row {{font-size: 1.2rem !important;}}
.ae-topk span[style*="monospace"] {{font-size: 1.2rem !important;}}
.ae-align th, .ae-align-legend {{font-size: {MIN_TICK + 1}px !important;}}
.ae-align tr {{height: {MIN_TICK + 12}px !important;}}
table.ae-table {{border-collapse: collapse; width: 100%; font-size: {TABLE_PX}px; line-height: 1.35; color: {INK};
  margin-bottom: 0.6rem;}}
table.ae-table th, table.ae-table td {{border: 1px solid {BORDER}; padding: 0.25rem 0.6rem; text-align: left;
  vertical-align: top;}}
table.ae-table th {{background: {CHIP_BG}; font-weight: 600; position: sticky; top: 0;}}
[data-testid="stAppDeployButton"] {{display: none;}}
</style>"""


def init() -> bool:
    """Read the mode for this session: the toggle's state, first seeded from ``?present=`` (a bad value is
    ignored with a note). Call it before :func:`st.set_page_config` so the sidebar can start collapsed."""
    url.init_widget(KEY, lambda p: url.bool_param(p, PARAM, False, what="presentation mode"))
    return is_on()


def is_on() -> bool:
    """Whether this browser session is in presentation mode."""
    return bool(st.session_state.get(KEY, False))


def sidebar_toggle() -> bool:
    """The sidebar toggle; writes the mode into the link and adds the mode's CSS. Returns the mode."""
    on = st.sidebar.toggle(
        "Presentation mode",
        key=KEY,
        help="Larger fonts for tokens, charts and tables, captions in full contrast, the sidebar "
        "collapsed (open it again with the arrow at the top left). Kept in the link.",
    )
    url.put(PARAM, bool(on), False)
    if on:
        st.sidebar.markdown(CSS, unsafe_allow_html=True)  # in the sidebar: no gap in the page
    return bool(on)


def _grown(size: float | None, default: float) -> int:
    return max(round((size or default) * SCALE), MIN_TICK)


def enlarged(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` with every font larger (tick labels and axis titles at least :data:`MIN_TICK` px)."""
    fig = go.Figure(fig)
    base = fig.layout.font.size or 12
    fig.update_layout(font_size=_grown(base, 12))
    if fig.layout.title.text:
        fig.update_layout(title_font_size=_grown(fig.layout.title.font.size, base + 2))
    if fig.layout.legend.font.size:
        fig.update_layout(legend_font_size=_grown(fig.layout.legend.font.size, base))

    def axis(ax) -> None:
        ax.update(tickfont_size=_grown(ax.tickfont.size, base), title_font_size=_grown(ax.title.font.size, base))

    fig.for_each_xaxis(axis)
    fig.for_each_yaxis(axis)
    for note in fig.layout.annotations:  # subplot titles and labels: larger, but not forced up to MIN_TICK
        note.font.size = round((note.font.size or base) * SCALE)

    def trace(t) -> None:
        if "textfont" in t and t.textfont.size:  # numbers in cells or beside bars: a little larger only
            t.textfont.size = round(t.textfont.size * 1.1)
        if "colorbar" in t:
            t.colorbar.tickfont.size = _grown(t.colorbar.tickfont.size, base)

    fig.for_each_trace(trace)
    return fig


def enlarged_altair(chart):
    """An Altair chart with larger axis, legend and title fonts (a new chart object; the original is kept)."""
    return (
        chart.configure_axis(labelFontSize=MIN_TICK, titleFontSize=MIN_TICK)
        .configure_legend(labelFontSize=MIN_TICK, titleFontSize=MIN_TICK)
        .configure_title(fontSize=MIN_TICK + 2)
    )
