"""The page's layout on a phone (a screen under :data:`PHONE_PX` CSS pixels wide, e.g. 390×844): CSS only.

Streamlit stacks columns on a narrow screen, one under the other, so a page built as two columns for a projector
(the step's numbers on the left, where the model looked on the right) put the right column's view of a step some
1,400 px below the Next button, and rows of small controls (the four step buttons, Layer and Head) took a line
each. :data:`CSS` changes, on a phone only:

- Translate: its keyed groups (``tr_box_main``, ``tr_box_view``, ``tr_box_attr``, ``tr_box_notes``:
  ``app_pages/translate/translate.py``) are laid out in that order, the step's view right under its numbers, what
  explains them last;
- the step buttons (:func:`ui.widgets.step_buttons`, keyed :data:`STEP_BUTTONS`) stay in one row, Reset, Back and
  Run to end as icons (their labels stay for screen readers and tests), and Translate's Layer and Head boxes stay
  side by side;
- titles are smaller, the page's side padding too.

Nothing here runs Python per visitor: the app adds the style once per run (``app.py``).
"""

from __future__ import annotations

# the key prefix of the step buttons' container (ui.widgets.step_buttons), which a phone keeps in a row
from ui.page_state import STEP_BUTTONS

#: Screens narrower than this (CSS px) get the phone layout: Streamlit stacks columns below 640 px.
PHONE_PX = 640

#: The Translate page's groups, in the order a phone shows them.
TRANSLATE_ORDER = ("tr_box_main", "tr_box_view", "tr_box_attr", "tr_box_notes")

_COLUMNS_OF = (
    '[data-testid="stHorizontalBlock"]:has(> [data-testid="stColumn"] > [data-testid="stVerticalBlock"] '
    '> [data-testid="stLayoutWrapper"] > .st-key-{key})'
)
_TRANSLATE = _COLUMNS_OF.format(key=TRANSLATE_ORDER[0])
_ROW = '[class*="st-key-{prefix}"] [data-testid="stHorizontalBlock"]'
_STEPS = f'[data-testid="stHorizontalBlock"][class*="st-key-{STEP_BUTTONS}"]'
#: Hidden but read: a button's label that a screen reader (and Playwright's get_by_role) still finds.
_VISUALLY_HIDDEN = (
    "position:absolute !important; width:1px; height:1px; overflow:hidden; clip:rect(0 0 0 0); white-space:nowrap;"
)

CSS = (
    f"<style>@media (max-width: {PHONE_PX - 0.02}px) {{"
    # the columns give their groups to the row, which lays them out one under the other in TRANSLATE_ORDER
    f"{_TRANSLATE} {{flex-direction: column; flex-wrap: nowrap;}}"
    f'{_TRANSLATE} > [data-testid="stColumn"], '
    f'{_TRANSLATE} > [data-testid="stColumn"] > [data-testid="stVerticalBlock"]'
    " {display: contents;}"
    + "".join(
        f'{_TRANSLATE} [data-testid="stLayoutWrapper"]:has(> .st-key-{key}) {{order: {i + 1}; width: 100%;}}'
        for i, key in enumerate(TRANSLATE_ORDER)
    )
    # rows of small controls stay rows: the step buttons' row (a horizontal container, itself the flex row) and
    # Translate's Layer and Head (two columns)
    + f"{_STEPS}, {_ROW.format(prefix='tr_box_layer_head')}"
    " {flex-wrap: nowrap !important; gap: 0.5rem;}"
    f'{_STEPS} > [data-testid="stElementContainer"], '
    f'{_ROW.format(prefix="tr_box_layer_head")} > [data-testid="stColumn"] {{min-width: 0 !important; width: auto; '
    "flex: 1 1 0 !important;}"
    f'{_STEPS} > [data-testid="stElementContainer"]:not(:nth-child(3)) button '
    f'[data-testid="stMarkdownContainer"] {{{_VISUALLY_HIDDEN}}}'
    f"{_STEPS} button {{padding-left: 0.25rem; padding-right: 0.25rem;}}"
    # a smaller title and page margins: more of the step on the first screen
    '[data-testid="stMain"] h1 {font-size: 2rem !important; padding-bottom: 0.25rem !important;}'
    ".block-container {padding-left: 0.9rem !important; padding-right: 0.9rem !important; "
    "padding-top: 3.75rem !important;}"
    "}</style>"
)

#: Width (px) figures are drawn for on a phone: a 390 px screen less the page's margins.
PHONE_FIGURE_PX = 360


def is_phone() -> bool:
    """Whether this session's browser says it is a phone ("Mobi" in its User-Agent, as browsers on phones write
    it). The server cannot see a screen's width; a figure laid out for 1,180 px and shrunk to a phone's 360 px wrote
    its labels over each other, so the pages lay out phone figures for :data:`PHONE_FIGURE_PX` instead."""
    import streamlit as st

    try:
        agent = st.context.headers.get("User-Agent") or ""
    except Exception:  # no browser session (a script run outside a server)
        return False
    return "Mobi" in agent


def plotly_config(config: dict) -> dict:
    """``config`` (Plotly's), without its toolbar on a phone: there it covered the chart's title when touched, and
    its zoom and pan tools fight the page's scrolling."""
    return {**config, "displayModeBar": False} if is_phone() else config


def figure_px(width: int) -> int:
    """``width`` (px), or :data:`PHONE_FIGURE_PX` on a phone (:func:`is_phone`)."""
    return PHONE_FIGURE_PX if is_phone() else width
