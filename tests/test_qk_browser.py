"""The Attention page's "Query · key" tab in Chromium at 1280×720 (a projector), for the shipped translator and
language model and the tiny Hugging Face MarianMT folder: its three charts are drawn within the screen's width,
every key label and dimension number is written without running into its neighbour, at 14 px or more (the
presentation mode's minimum there), and the page shows no traceback. Screenshots go to ``test-artifacts/``.
Same server helpers as ``browser_helpers.py`` (skipped where Chromium or the models are missing).
"""

from __future__ import annotations

from urllib.parse import quote_plus

import pytest
from browser_helpers import ARTIFACTS, PROJECTOR, assert_no_traceback, settle
from test_presentation_browser import overlapping

from ui.presentation import MIN_TICK

pytestmark = pytest.mark.xdist_group("browser-views")  # what a page looks like: tests/browser_helpers.py

#: Texts of one SVG selector inside a chart: content, box (px, as drawn) and computed font size.
TEXTS_JS = """(root, selector) => [...root.querySelectorAll(selector)].filter(t => t.textContent.trim())
    .map(t => { const r = t.getBoundingClientRect();
                return {text: t.textContent, x: r.x, y: r.y, w: r.width, h: r.height,
                        size: parseFloat(getComputedStyle(t).fontSize)}; }).filter(b => b.w > 0)"""


@pytest.mark.parametrize(
    "ckpt, kind, present",
    [
        ("en-de", "cross", False),
        ("en-de", "decoder", True),
        ("brown-lm", "self", False),
        ("opus-mt-tiny", "cross", True),
    ],
)
def test_the_tab_is_drawn_readably_at_1280x720(hf_server, new_page, ckpt, kind, present):
    page = new_page(PROJECTOR)
    query = f"ckpt={ckpt}&kind={kind}&head=2&tab={quote_plus('Query · key')}&query=3"
    query += "&present=1" if present else ""
    page.goto(f"{hf_server}/attention?{query}")
    score = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="scores every key")
    score.wait_for()
    settle(page)
    page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .main-svg').length >= 3")
    page.wait_for_timeout(700)  # Plotly draws in the next frames
    assert_no_traceback(page)
    for chart in page.locator('[data-testid="stPlotlyChart"]').all():
        box = chart.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= PROJECTOR[0] + 1, box
    smallest = MIN_TICK if present else 14
    keys = score.evaluate(TEXTS_JS, ".ytick text")
    dims = score.evaluate(TEXTS_JS, ".xtick text")
    assert len(keys) >= 4 and len(dims) >= 4, (keys, dims)
    for texts in (keys, dims):
        assert min(t["size"] for t in texts) >= smallest, sorted(t["size"] for t in texts)[:3]
        assert overlapping(texts) == []
    name = f"qk-{ckpt}-{kind}-1280x720{'-presentation' if present else ''}.png"
    score.screenshot(path=str(ARTIFACTS / name))
