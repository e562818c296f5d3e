"""Attention vs attribution in Debian's Chromium at 1280×720, normal and presentation mode, on en-de and brown-lm:
the step view still starts on the first screen, the grid labels every piece (each label drawn, none under 14 px,
none overlapping another of its tier) and fits the screen's width, and the faithfulness table is drawn.
Screenshots go to ``test-artifacts/attribution-*.png``.
"""

from __future__ import annotations

import pytest
from browser_helpers import ARTIFACTS, PROJECTOR, assert_no_traceback, expect, settle
from test_presentation_browser import in_viewport

pytestmark = pytest.mark.xdist_group("browser-views")  # what a page looks like: tests/browser_helpers.py

CASES = {"en-de": ("My+brother+lives+in+Berlin.", 6 + 1 + 3), "brown-lm": ("She+looked+at+him+and", 1 + 5 + 2)}
#: Every column label of the grid: its box and font size, as drawn.
LABELS_JS = """el => [...el.querySelectorAll('th.ae-attr-col')].map(th => {
    const r = (th.querySelector('div div') || th).getBoundingClientRect();
    return {tier: th.dataset.tier, x: r.x, w: r.width, h: r.height, size: parseFloat(getComputedStyle(th).fontSize),
            text: th.innerText.trim()};
})"""


@pytest.mark.parametrize("present", ["0", "1"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_grid_labels_every_piece_readably(server, new_page, name, present):
    text, columns = CASES[name]
    page = new_page(PROJECTOR)
    page.goto(f"{server}/?ckpt={name}&text={text}&step=3&attr=1&present={present}")
    grid = page.locator(".ae-attr")
    grid.wait_for(timeout=120_000)
    settle(page)
    in_viewport(page, page.get_by_role("button", name="Next"), "the Next button")  # the step view still on top
    grid.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    labels = grid.evaluate(LABELS_JS)
    assert len(labels) == columns and all(label["text"] for label in labels), labels
    assert min(label["size"] for label in labels) >= 14
    for tier in {label["tier"] for label in labels}:  # neighbours in one tier never overlap
        boxes = sorted((label["x"], label["x"] + label["w"]) for label in labels if label["tier"] == tier)
        assert all(a[1] <= b[0] + 0.5 for a, b in zip(boxes, boxes[1:], strict=False)), boxes
    box, width = grid.bounding_box(), page.viewport_size["width"]
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 1, box
    expect(page.locator("text=comprehensiveness ↑").first).to_be_visible()
    assert_no_traceback(page)
    page.screenshot(path=str(ARTIFACTS / f"attribution-{name}-present{present}.png"))
