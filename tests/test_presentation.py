"""Presentation mode ("readable from the back of the room"), with Streamlit's AppTest.

A sidebar toggle kept in the link as ``?present=1``: figures drawn through ``ui.widgets.show_figure`` get larger
fonts (axis labels at least ``MIN_TICK`` px); the mode belongs to one browser session, never to the process.
The browser half (layout at 1280×720, font sizes as drawn) is in ``test_presentation_browser.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
CKPT = ROOT / "checkpoints" / "en-de"

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from ui import presentation
from ui.presentation import KEY, MIN_TICK, PARAM, enlarged

needs_model = pytest.mark.skipif(not (CKPT / "model.safetensors").is_file(), reason="checkpoints/en-de is missing")


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


def make_app(**query: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=90)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def axis_font_sizes(at: AppTest) -> list[float]:
    """Tick-label and axis-title font sizes of every axis of every Plotly chart of the page (``None`` = unset, 0)."""
    sizes = []
    for chart in at.get("plotly_chart"):
        layout = json.loads(chart.proto.spec)["layout"]
        for name, axis in layout.items():
            if name.startswith(("xaxis", "yaxis")):
                sizes.append((axis.get("tickfont") or {}).get("size") or 0)
                sizes.append(((axis.get("title") or {}).get("font") or {}).get("size") or 0)
    return sizes


# --- the figure helper (no Streamlit) ----------------------------------------------------------------------
def test_enlarged_is_a_copy_with_every_axis_label_at_least_min_tick():
    fig = make_subplots(rows=1, cols=2, subplot_titles=("a", "b"))
    fig.add_trace(go.Heatmap(z=[[0, 1], [1, 0]], texttemplate="%{z}", textfont=dict(size=10)), 1, 1)
    fig.add_trace(go.Bar(x=[1, 2], y=["x", "y"], orientation="h"), 1, 2)
    fig.update_layout(font=dict(size=12), title_text="t")
    fig.update_xaxes(tickfont=dict(size=9))
    before = json.loads(fig.to_json())
    big = enlarged(fig)
    assert json.loads(fig.to_json()) == before  # a cached figure shared by other sessions is never changed
    axes = [big.layout[name] for name in big.layout if name.startswith(("xaxis", "yaxis"))]
    assert len(axes) == 4
    for axis in axes:
        assert axis.tickfont.size >= MIN_TICK >= 14 and axis.title.font.size >= MIN_TICK
    assert big.layout.font.size > 12 and big.layout.title.font.size > 12
    assert [a.font.size for a in big.layout.annotations] == [
        round((a.font.size or 12) * presentation.SCALE) for a in fig.layout.annotations
    ]
    assert big.data[0].textfont.size == 11  # numbers in cells grow a little only (they must stay inside)


# --- the app ---------------------------------------------------------------------------------------------
@needs_model
def test_the_toggle_is_kept_in_the_link_and_a_link_restores_it():
    at = make_app()
    clean(at)
    toggle = at.toggle(key=KEY)
    assert toggle.value is False and PARAM not in at.query_params
    toggle.set_value(True).run()
    clean(at)
    assert at.session_state[KEY] is True and at.query_params[PARAM] == "1"

    again = make_app(**{PARAM: at.query_params[PARAM]})  # the link, opened in a new session
    clean(again)
    assert again.toggle(key=KEY).value is True and again.query_params[PARAM] == "1"
    again.toggle(key=KEY).set_value(False).run()
    assert PARAM not in again.query_params and again.session_state[KEY] is False


@needs_model
def test_a_bad_value_in_the_link_is_ignored_with_a_note():
    at = make_app(**{PARAM: "maybe"})
    clean(at)
    assert at.toggle(key=KEY).value is False
    assert any(f"`{PARAM}`" in i.value for i in at.info), [i.value for i in at.info]


@needs_model
def test_presentation_mode_enlarges_the_attention_charts_for_this_session_only():
    """Two sessions in one process (as on a server): the presenting one gets axis labels of ≥ MIN_TICK px, the
    other keeps the normal sizes: the mode is per session, not a module global. (On the Attention page: the
    Translate page draws HTML, no Plotly chart.)"""
    page = "app_pages/attention/attention.py"
    shown = make_app(text="The cat sat on the mat.", **{PARAM: "1"}).switch_page(page).run()
    plain = make_app(text="The cat sat on the mat.").switch_page("app_pages/attention/attention.py").run()
    shown.run()  # the presenting session runs again after the plain one started
    clean(shown), clean(plain)
    big, small = axis_font_sizes(shown), axis_font_sizes(plain)
    assert len(big) == len(small) > 0
    assert min(big) >= MIN_TICK
    assert min(small) < MIN_TICK  # unchanged figures: at least one default (unset) size
    assert plain.toggle(key=KEY).value is False and PARAM not in plain.query_params


# --- tables (the data grid draws on a canvas that no CSS reaches) -----------------------------------------------
def test_a_projected_table_is_escaped_html_with_large_text():
    from ui.widgets import table_html

    out = table_html(
        [
            {"token": "<bos>", "error": 1.5e-7, "p": 0.123456789, "kept": True},
            {"token": "▁a&b", "error": 2e-3, "p": -12.345, "kept": False},
        ],
        formats={"error": "{:.2e}", "missing": "{:.1f}"},
        height=300,
    )
    assert 'class="dataframe ae-table"' in out and "max-height:300px" in out
    assert "&lt;bos&gt;" in out and "<bos>" not in out and "▁a&amp;b" in out
    assert "1.50e-07" in out and "0.123457" in out and "-12.345" in out and "True" in out
    assert "<th>token</th>" in out and out.count("<tr") == 3
    # numbers right-aligned (digits under digits, as st.table draws them), text and booleans left
    assert '<th style="text-align:right">error</th>' in out and '<td style="text-align:right">-12.345</td>' in out
    assert "<td>True</td>" in out and "<td>&lt;bos&gt;</td>" in out
    blank = table_html([{"a": 1.0, "b": "x"}, {"a": None, "b": None}])
    assert '<td style="text-align:right"></td><td></td></tr>' in blank  # a blank keeps its column's alignment
    assert presentation.TABLE_PX >= 16 and f"font-size: {presentation.TABLE_PX}px" in presentation.CSS


def test_a_table_built_once_is_escaped_html_that_looks_as_st_table_draws_it():
    """The HTML a view builds once and draws on every click in place of ``st.table``: its frame, greyed headers,
    numbers right-aligned and text left, every cell escaped, a float formatted or to 6 digits, None blank."""
    from ui.widgets import styled_table_html

    out = styled_table_html(
        [
            {"method": "<bos>", "comp": 0.123456789, "n": 3, "note": "a&b"},
            {"method": "random", "comp": -1.5, "n": None, "note": None},
        ],
        formats={"comp": "{:.3f}"},
    )
    assert out.startswith('<div class="ae-styled-table"') and "border-radius:8px" in out
    assert "&lt;bos&gt;" in out and "<bos>" not in out and "a&amp;b" in out
    assert ">0.123</td>" in out and ">-1.500</td>" in out and ">3</td>" in out
    cells = re.findall(r"<td style=\"([^\"]*)\">([^<]*)</td>", out)
    assert [text for _, text in cells] == ["&lt;bos&gt;", "0.123", "3", "a&amp;b", "random", "-1.500", "", ""]
    align = [re.search(r"text-align:(\w+)", style).group(1) for style, _ in cells]
    assert align == ["left", "right", "right", "left"] * 2  # a column with a blank is still a number column
    assert out.count("<th ") == 4 and "rgba(47,45,43,0.7)" in out  # the headers greyed as st.table's
    assert "border-right" not in cells[3][0] and "border-bottom" not in cells[-1][0]  # the frame closes the table
    assert styled_table_html([]).count("<tr>") == 1  # no rows: an empty header, no error
