"""Widgets shared by the pages: the output box, the step buttons, and the one way a page shows a figure or a table.

Streamlit glue only: what is drawn comes from :mod:`viz`; what a step is comes from the caller.
"""

from __future__ import annotations

import json
import numbers
import os
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import streamlit as st

from ui import presentation, responsive
from ui.responsive import STEP_BUTTONS
from viz.theme import ACCENT, ACCENT_BG, FAINT, PLOTLY_CONFIG, SUBTLE, escape_html

# --- the output box -----------------------------------------------------------------------------------------
#: Lines of output the output box shows before it scrolls.
OUTPUT_LINES = 3


def output_html(text: str, prompt: str = "", empty: str = "(empty output)", more: bool = False) -> str:
    """The HTML of :func:`output_box`: ``text`` escaped, ``prompt`` greyed before it, ``empty`` (italic) when
    there is no text; ``more``: the decoding goes on past this text (a greyed "…" follows it)."""
    # the note for no text is smaller and greyed: it is about the output, not the output
    body = escape_html(text) or f'<i style="font-size:1.1rem;color:{SUBTLE}">{escape_html(empty)}</i>'
    if more and text:
        body += f' <span class="ae-output-more" style="color:{FAINT}" title="{escape_html(MORE_TITLE)}">…</span>'
    if prompt:
        body = f'<span style="color:{FAINT}">{escape_html(prompt)}</span> {body}'
    # At most OUTPUT_LINES lines (fewer in presentation mode, ui/presentation.py), scrolled beyond: a long output
    # pushed the step's numbers below a projector's 720 px. Scrolled to its end (column-reverse): while stepping,
    # the newest token is the one to see
    return (
        f'<div class="ae-output" style="font-size:1.6rem;line-height:1.35;padding:0.5rem 1rem;'
        f'border-left:6px solid {ACCENT};background:{ACCENT_BG};border-radius:4px;margin:0.1rem 0 0.5rem 0">'
        f'<div class="ae-output-text" style="max-height:{OUTPUT_LINES * 1.35}em;overflow-y:auto;display:flex;'
        f'flex-direction:column-reverse"><div>{body}</div></div>'
        "</div>"
    )


#: What :func:`output_box` says before a step-by-step decoding has taken its first step (``empty=``): what will
#: happen, not "(empty output)", which read as if the model had produced nothing.
BEFORE_FIRST_STEP = "Nothing generated yet: press Next for the first token, or Run to end for all of them."
#: The tooltip of the "…" after a decoding's text that goes on (``more=``).
MORE_TITLE = "More to come: Next generates the next token, Run to end all of them."


def output_box(text: str, prompt: str = "", where=None, empty: str = "(empty output)", more: bool = False) -> None:
    """The text a decoding produced, large, in the accent box; ``prompt`` (a language model's input) is shown
    greyed before it. No text reads ``empty``: "(empty output)" for a finished decoding, :data:`BEFORE_FIRST_STEP`
    for one that has not started. ``more``: the decoding goes on past ``text`` (stepping), shown by a greyed "…"."""
    (where or st).markdown(output_html(text, prompt, empty, more), unsafe_allow_html=True)


# --- the step buttons ---------------------------------------------------------------------------------------
#: Why a step's token was not the rule's: a Hugging Face folder's generation config forces a last token at the cap.
FORCED_AT_CAP = (
    "this model's generation_config.json ends a decoding that reaches its length limit with this token "
    "(forced_eos_token_id), as transformers' generate does."
)


#: A JSON-lines file that records every step callback and every drawing of the step buttons, per session, when
#: set (``ATTENTION_EXPLORER_STEP_LOG``): how the chaos benchmark tells a click Streamlit never delivered from one
#: the page did not count.
STEP_LOG = os.environ.get("ATTENTION_EXPLORER_STEP_LOG", "")
_STEP_LOG_LOCK = threading.Lock()


def _log_step(event: str, **fields: Any) -> None:
    if not STEP_LOG:
        return
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    line = {"t": time.time(), "pid": os.getpid(), "session": ctx.session_id if ctx else "", "event": event} | fields
    with _STEP_LOG_LOCK, open(STEP_LOG, "a") as f:
        f.write(json.dumps(line) + "\n")


def _move_step(key: str, delta: int | None, to: int, total: int) -> None:
    """Button callback: ``delta`` steps from the current one, or to ``to`` when ``delta`` is None; within
    ``[0, total]``. Relative on purpose: a click that arrives before the page has redrawn its buttons still
    counts from the step the previous click reached."""
    ss = st.session_state
    before = int(ss.get(key, 0))
    target = to if delta is None else before + delta
    ss[key] = min(max(target, 0), total)
    _log_step("move", key=key, delta=delta, to=to, before=before, after=ss[key])


def step_buttons(key: str, step: int, total: int, at_end: bool, status: str = "") -> None:
    """Reset / Back / Next / Run to end for the step in ``st.session_state[key]`` (``total`` = the last step),
    and ``status`` (markdown) on the line below them.

    The buttons move the step in ``on_click`` callbacks, which run before the script: the page (and the buttons'
    enabled state) is then drawn for the new step in the same run.
    """
    _log_step("draw", key=key, step=step, total=total)
    # One keyed row (a horizontal container, not four columns: the same row in five blocks fewer, which every
    # click of every visitor sends); on a phone the four stay in it, Next's label alone (ui.responsive)
    row = st.container(key=f"{STEP_BUTTONS}{key}", horizontal=True, gap="small")
    # Material icons, not emoji: a lecture-room PC may have no emoji font.
    row.button(
        "Reset",
        icon=":material/first_page:",
        width="stretch",
        disabled=step == 0,
        on_click=_move_step,
        args=(key, None, 0, total),
    )
    row.button(
        "Back",
        icon=":material/chevron_left:",
        width="stretch",
        disabled=step == 0,
        on_click=_move_step,
        args=(key, -1, 0, total),
    )
    row.button(
        "Next",
        icon=":material/chevron_right:",
        width="stretch",
        type="primary",
        disabled=at_end,
        on_click=_move_step,
        args=(key, 1, 0, total),
    )
    row.button(
        "Run to end",
        icon=":material/last_page:",
        width="stretch",
        disabled=at_end,
        on_click=_move_step,
        args=(key, None, total, total),
    )
    if status:
        st.markdown(status)


# --- figures ----------------------------------------------------------------------------------------------
def show_figure(fig, where=None, **kwargs):
    """``st.plotly_chart`` (full width, the figure's own colours, :data:`PLOTLY_CONFIG`), with larger fonts
    when this session is in presentation mode. ``where``: a column or container (default: the page)."""
    kwargs.setdefault("width", "stretch")
    kwargs.setdefault("theme", None)
    kwargs.setdefault("config", responsive.plotly_config(PLOTLY_CONFIG))
    if presentation.is_on():
        fig = presentation.enlarged(fig)
    return (where or st).plotly_chart(fig, **kwargs)


def show_altair(chart, where=None, **kwargs):
    """``st.altair_chart`` with larger fonts in presentation mode; returns what Streamlit returns (a selection)."""
    if presentation.is_on():
        chart = presentation.enlarged_altair(chart)
    return (where or st).altair_chart(chart, **kwargs)


# --- tables -----------------------------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    """A cell's default text in a projected table: floats to 6 significant digits (``-12.345``, ``1e-07``)."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _cell_formatters(columns: Sequence[Any], formats: Mapping[str, str] | None) -> dict[Any, Callable[[Any], str]]:
    """column → what writes its cells, the one rule of both HTML tables: ``formats``' ``str.format`` spec where one
    is given, :func:`_fmt` elsewhere."""
    spec = {c: str(f).format for c, f in (formats or {}).items()}
    return {c: spec.get(c, _fmt) for c in columns}


def _blank(value: Any) -> bool:
    """A missing cell, as pandas says (``None``, NaN of any float type, ``pd.NA``, ``NaT``); a list in a cell is not."""
    return bool(pd.api.types.is_scalar(value) and pd.isna(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, (bool, np.bool_))


def _number_columns(columns: Sequence[Any], rows: Sequence[Sequence[Any]]) -> set[Any]:
    """The columns whose cells (blanks aside) are all numbers: both HTML tables right-align them, as ``st.table``
    does, so that digits line up under each other. ``rows``: cell values in ``columns``' order, ``None`` blank."""
    number = set()
    for i, c in enumerate(columns):
        values = [row[i] for row in rows if row[i] is not None]
        if values and all(_is_number(v) for v in values):
            number.add(c)
    return number


def table_html(
    data: pd.DataFrame | Sequence[Mapping[str, Any]],
    formats: Mapping[str, str] | None = None,
    height: int | None = None,
) -> str:
    """``data`` as an HTML table (class ``ae-table``, styled by :data:`ui.presentation.CSS`), every header and cell
    HTML-escaped, the index left out, number columns right-aligned. ``formats``: column → ``str.format`` spec (e.g.
    ``{"error": "{:.2e}"}``); other floats get 6 significant digits; a missing value is a blank cell. ``height``
    (px): scroll vertically beyond it (``None``: every row)."""
    frame = pd.DataFrame(data)
    columns = list(frame.columns)
    write = _cell_formatters(columns, formats)
    rows = [[None if _blank(v) else v for v in row] for row in frame.itertuples(index=False, name=None)]
    right = _number_columns(columns, rows)

    def cell(tag: str, column: Any, text: str) -> str:
        style = ' style="text-align:right"' if column in right else ""
        return f"<{tag}{style}>{escape_html(text)}</{tag}>"

    head = "".join(cell("th", c, str(c)) for c in columns)

    def line(row: Sequence[Any]) -> str:
        cells = (cell("td", c, "" if v is None else write[c](v)) for c, v in zip(columns, row, strict=True))
        return f"<tr>{''.join(cells)}</tr>"

    body = "".join(line(row) for row in rows)
    table = f'<table class="dataframe ae-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    limit = f"max-height:{int(height)}px;overflow-y:auto;" if height else ""
    return f'<div class="ae-table-wrap" style="overflow-x:auto;{limit}">{table}</div>'


#: ``st.table``'s frame and rules in Streamlit's light theme, which :func:`styled_table_html` draws.
_RULE = "1px solid rgb(232, 229, 226)"


def styled_table_html(rows: Sequence[Mapping[str, Any]], formats: Mapping[str, str] | None = None) -> str:
    """``rows`` (column → value, the first row's columns) as HTML that looks as ``st.table`` draws them: a rounded
    frame, 14 px text, greyed headers, numbers right-aligned, text wrapped in a narrow column; every cell escaped, no
    index. ``formats``: column → ``str.format`` spec; other floats get 6 significant digits, ``None`` a blank cell.

    For a table built once and drawn on every click through ``st.markdown``: ``st.table`` marshals a pandas Styler
    each time (about 7 ms of the server's interpreter for five rows), sending this string a fraction of one."""
    columns = list(rows[0]) if rows else []
    write = _cell_formatters(columns, formats)

    right = _number_columns(columns, [[r.get(c) for c in columns] for r in rows])
    align = {c: "right" if c in right else "left" for c in columns}

    def cell(tag: str, text: str, style: str, last_col: bool, last_row: bool) -> str:
        rules = ("" if last_col else f"border-right:{_RULE};") + ("" if last_row else f"border-bottom:{_RULE};")
        style += f"border:0;{rules}vertical-align:middle"
        return f'<{tag} style="{style}">{escape_html(text)}</{tag}>'

    head = "".join(
        cell(
            "th",
            c,
            "padding:4px 6px 4px 8px;font-weight:400;color:rgba(47,45,43,0.7);text-align:left;",
            i == len(columns) - 1,
            not rows,
        )
        for i, c in enumerate(columns)
    )
    body = []
    for r, row in enumerate(rows):
        cells = []
        for i, c in enumerate(columns):
            v = row.get(c)
            text = "" if v is None else write[c](v)
            cells.append(
                cell("td", text, f"padding:4px 6px;text-align:{align[c]};", i == len(columns) - 1, r == len(rows) - 1)
            )
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="ae-styled-table" style="border:{_RULE};border-radius:8px;overflow:auto;margin-bottom:1rem">'
        '<table style="width:100%;margin:0;border:none;border-collapse:separate;border-spacing:0;font-size:14px;'
        f'line-height:21px"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )


def _float_format(column: pd.Series):
    """How a static table writes a float column: whole numbers without decimals (a count with a blank cell is a
    float column to pandas: "400", not "400.0000"), others as :func:`_fmt`."""
    values = column.dropna()
    return "{:,.0f}".format if len(values) and bool((values == values.round()).all()) else _fmt


def static_styler(frame: pd.DataFrame, formats: Mapping[str, str] | None = None):
    """``frame`` styled for ``st.table``, which writes every float with four decimals unless told: the float columns
    by :func:`_float_format`, ``formats`` (column → ``str.format`` spec) over them, a missing value blank."""
    spec = {c: _float_format(frame[c]) for c in frame.columns if frame[c].dtype.kind == "f"}
    spec.update({c: f for c, f in (formats or {}).items() if c in frame.columns})
    return frame.style.format(spec, na_rep="")


def show_table(
    data: pd.DataFrame | Sequence[Mapping[str, Any]],
    where=None,
    *,
    wrap: bool = False,
    formats: Mapping[str, str] | None = None,
    height: int | None = None,
    **kwargs,
):
    """The one way a page shows a table, the index hidden.

    Normally ``st.dataframe`` (sortable, scrollable), or ``st.table`` when ``wrap`` (static cells in which long
    text wraps). In presentation mode an HTML table (:func:`table_html`) whose text CSS enlarges to at least
    :data:`ui.presentation.MIN_TICK` px: the data grid draws on a canvas that no CSS reaches.

    Args:
        data: a DataFrame or a list of row dicts (column → value).
        where: a column or container (default: the page).
        formats: column → ``str.format`` spec, in both modes (normally through a pandas Styler).
        height: the dataframe's height in px; in presentation mode the table scrolls beyond it.
        kwargs: more arguments of ``st.dataframe`` / ``st.table`` (``column_config``, ``key``); not used in
            presentation mode, where the table is static.
    """
    where = where or st
    if presentation.is_on():
        return where.html(table_html(data, formats, height))
    frame = pd.DataFrame(data)
    if wrap:
        return where.table(static_styler(frame, formats), hide_index=True, **kwargs)
    shown = frame.style.format(dict(formats)) if formats else frame
    if height:
        kwargs["height"] = height
    return where.dataframe(shown, hide_index=True, **kwargs)
