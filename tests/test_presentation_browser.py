"""Presentation mode and the Translate step view in a real browser ("readable from the back of the room").

A lecturer clicks Next in front of a class at 1280×720: the output, the step buttons, the 10 most probable next
tokens and the cross-attention of the current token must be on screen together, without scrolling; in
presentation mode the charts' axis labels are at least 14 px as drawn, and the sidebar is collapsed. A link with
``&present=1`` opens Translate, Attention and the Decoding lab in presentation mode as a first visit. Same server,
browser and helpers as ``browser_helpers.py`` (Debian's Chromium; skipped where it or the model is missing).
"""

from __future__ import annotations

import json
import re

import pytest
from browser_helpers import (
    ARTIFACTS,
    PROJECTOR,
    ROOT,
    assert_no_traceback,
    click_and_wait_step,
    expect,
    open_translate,
    settle,
)

from model.config import ModelConfig
from ui.model_card import opening_layer
from ui.presentation import MIN_TICK

#: make test runs two xdist workers (--dist loadgroup): the browser tests share one, one after another — two apps
#: and two Chromiums at once on a 2-core machine slow clicks enough to break timing-sensitive tests.
pytestmark = pytest.mark.xdist_group("browser-views")  # what a page looks like: tests/browser_helpers.py

FULL_HD = (1920, 1080)  # (width, height) in CSS pixels, as PROJECTOR

#: Font sizes (px) of the row and column labels of the HTML alignment map.
ALIGNMENT_LABEL_SIZES_JS = """() => [...document.querySelectorAll('.ae-align th')].filter(t => t.innerText.trim())
    .map(t => parseFloat(getComputedStyle(t).fontSize))"""


def in_viewport(page, locator, what: str) -> None:
    """``locator`` (one element) lies wholly inside the viewport: seen without scrolling."""
    expect(locator).to_have_count(1)
    box = locator.bounding_box()
    view = page.viewport_size
    assert box is not None, what
    assert box["x"] >= 0 and box["y"] >= 0, (what, box)
    assert box["x"] + box["width"] <= view["width"] + 1 and box["y"] + box["height"] <= view["height"] + 1, (
        what,
        box,
        view,
    )


def presenting_from_the_link(page) -> None:
    """A first visit by a link with ``&present=1`` is in presentation mode: the sidebar is collapsed, its toggle is
    on, the page's text is enlarged (what a screenshot shows), and the link keeps it."""
    expect(page.locator('[data-testid="stSidebar"]')).to_have_attribute("data-collapsed", "true")
    expect(page.get_by_role("switch", name="Presentation mode")).to_be_checked()
    sizes = page.locator(
        '[data-testid="stMain"] [data-testid="stMarkdown"] [data-testid="stMarkdownContainer"] > p'
    ).evaluate_all("ps => ps.map(p => parseFloat(getComputedStyle(p).fontSize))")
    assert sizes and min(sizes) >= 17.5, sizes  # 1.12rem; 16 px outside presentation mode
    assert "present=1" in page.url


@pytest.mark.parametrize(
    "viewport, present",
    [(PROJECTOR, True), (PROJECTOR, False), (FULL_HD, True)],
    ids=["1280x720-presentation", "1280x720-normal", "1920x1080-presentation"],
)
def test_translate_step_view_fits_the_screen(server, new_page, viewport, present):
    page = new_page(viewport)
    open_translate(page, server, "?text=The+cat+sat+on+the+mat." + ("&present=1" if present else ""))
    if present:
        presenting_from_the_link(page)
    for k in (1, 2, 3):
        click_and_wait_step(page, "Next", k)
    page.wait_for_timeout(500)  # let the browser lay the step out
    sidebar = page.locator('[data-testid="stSidebar"]')
    expect(sidebar).to_have_attribute("data-collapsed", "true" if present else "false")

    in_viewport(page, page.locator(".ae-output"), "the output box")
    in_viewport(page, page.get_by_role("button", name="Next"), "the Next button")
    in_viewport(page, page.get_by_role("button", name="Back"), "the Back button")
    in_viewport(page, page.locator(".ae-topk"), "the 10 most probable next tokens")
    in_viewport(page, page.get_by_text("Cross-attention of step 3", exact=False), "the cross-attention heading")
    alignment = page.locator(".ae-align").filter(has_text="Alignment so far")
    in_viewport(page, alignment, "the cross-attention chart")
    labels = page.evaluate(ALIGNMENT_LABEL_SIZES_JS)
    assert len(labels) >= 6 + 3, labels  # "The cat sat on the mat." + <eos> columns, three rows
    assert min(labels) >= (MIN_TICK if present else 14), sorted(labels)[:5]

    assert_no_traceback(page)
    name = f"presentation-translate-{viewport[0]}x{viewport[1]}{'' if present else '-normal'}.png"
    page.screenshot(path=str(ARTIFACTS / name))  # the viewport only: what the room sees


def test_the_sidebar_toggle_collapses_the_sidebar_and_goes_into_the_link(server, new_page):
    page = new_page(PROJECTOR)
    open_translate(page, server, "?text=The+cat+sat+on+the+mat.")
    sidebar = page.locator('[data-testid="stSidebar"]')
    expect(sidebar).to_have_attribute("data-collapsed", "false")
    sidebar.get_by_text("Presentation mode").click()
    page.wait_for_url(lambda url: "present=1" in url)
    settle(page)
    expect(sidebar).to_have_attribute("data-collapsed", "true")
    assert_no_traceback(page)


# --- the Attention page and the Decoding lab on one screen, tables, the KV-cache figure -------------------------
#: Of the first chart, at least this much (px) must be on the first screen: its top no lower than the viewport's
#: height less this (before the redesign Attention's heatmaps began at 600 px and the lab's chart at 760 px).
SHOWN_PX = 300
#: Every text of the charts inside ``root`` (an element): content, box (px, as drawn) and computed font size.
CHART_TEXTS_JS = """(root) => [...root.querySelectorAll('svg text')].filter(t => t.textContent.trim())
    .map(t => { const r = t.getBoundingClientRect();
                return {text: t.textContent, x: r.x, y: r.y, w: r.width, h: r.height,
                        size: parseFloat(getComputedStyle(t).fontSize)}; }).filter(b => b.w > 0)"""
#: The layer the Attention page opens the shipped translator on (its card may name one; else the last).
OPEN_LAYER = opening_layer(
    json.loads((ROOT / "checkpoints" / "en-de" / "card.json").read_text(encoding="utf-8")),
    ModelConfig.from_json(ROOT / "checkpoints" / "en-de" / "config.json").n_decoder_layers,
)
PAGES = {  # page → (path, text that says the page is drawn, the main chart's text)
    # a title may wrap between "·" and "head" on a narrow chart (its lines are separate SVG texts)
    "attention": (
        "attention?text=The+cat+sat+on+the+mat.",
        "Translation:",
        re.compile(rf"layer {OPEN_LAYER + 1} ·\s*head 1"),
    ),  # the layer the page opens on
    "decoding": ("decoding?text=The+cat+sat+on+the+mat.&step=3", "Step 3", "to the next token"),
}


def overlapping(boxes: list[dict], slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes intersect by more than ``slack`` px each way."""
    return [
        (a["text"], b["text"])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > slack
        and min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > slack
    ]


@pytest.mark.parametrize("name", list(PAGES))
# 1280×720 only: the smaller screen is the harder case (the Translate test above also checks 1920×1080)
@pytest.mark.parametrize(
    "viewport, present", [(PROJECTOR, True), (PROJECTOR, False)], ids=["1280x720-presentation", "1280x720-normal"]
)
def test_the_main_chart_starts_on_the_first_screen(server, new_page, name, viewport, present):
    path, drawn, chart_text = PAGES[name]
    page = new_page(viewport)
    page.goto(f"{server}/{path}" + ("&present=1" if present else ""))
    page.get_by_text(drawn, exact=False).first.wait_for()
    settle(page)
    if present:
        presenting_from_the_link(page)
    chart = page.locator('[data-testid="stPlotlyChart"]').filter(has_text=chart_text).first
    chart.wait_for()
    page.wait_for_timeout(500)  # Plotly draws after the run
    box = chart.bounding_box()
    assert box is not None and 0 <= box["y"] <= viewport[1] - SHOWN_PX, (name, box)
    assert box["height"] >= SHOWN_PX, box
    if name == "decoding":  # the step buttons stay on screen beside it
        in_viewport(page, page.get_by_role("button", name="Next"), "the Next button")
    assert_no_traceback(page)
    shot = f"presentation-{name}-{viewport[0]}x{viewport[1]}{'' if present else '-normal'}.png"
    page.screenshot(path=str(ARTIFACTS / shot))  # the viewport only: what the room sees


def test_tables_and_the_kv_cache_figure_are_readable_in_presentation_mode(server, new_page):
    """Tables are HTML there (the data grid's canvas ignored the CSS) with text of 16 px or more; every text of the
    KV-cache figure is at least 14 px, and none runs into another."""
    page = new_page(PROJECTOR)
    page.goto(f"{server}/decoding?text=The+cat+sat+on+the+mat.&step=3&present=1")
    page.get_by_text("Step 3", exact=False).first.wait_for()
    settle(page)
    cells = page.locator("table.ae-table td")
    cells.first.wait_for(state="attached")  # the tables come after the chart, late in the run
    sizes = cells.evaluate_all("cells => cells.map(c => parseFloat(getComputedStyle(c).fontSize))")
    assert sizes and min(sizes) >= 16, sorted(sizes)[:3]
    assert page.locator('[data-testid="stDataFrame"]').count() == 0
    page.get_by_role("tab", name="KV cache").click()
    kv = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="what the decoder keeps")
    kv.wait_for()
    kv.scroll_into_view_if_needed()
    page.wait_for_timeout(700)
    texts = kv.evaluate(CHART_TEXTS_JS)
    assert len(texts) > 10 and min(t["size"] for t in texts) >= 14, sorted(t["size"] for t in texts)[:3]
    assert overlapping(texts) == []
    assert_no_traceback(page)
    kv.screenshot(path=str(ARTIFACTS / "presentation-kv-cache-1280x720.png"))
