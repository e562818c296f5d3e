"""The logit lens in Debian's Chromium at 1280×720, presentation mode, on en-de, brown-lm and a tiny Hugging Face
MarianMT folder: on Translate the table is drawn under the step view (which still starts on the first screen and does
not move when the lens is turned off), a row per decoder layer, no text under 14 px and nothing wider than the
screen; in the Decoding lab its tab draws the heatmap of every step so far.
Screenshots go to ``test-artifacts/lens-*.png``.
"""

from __future__ import annotations

import pytest
from browser_helpers import ARTIFACTS, PROJECTOR, assert_no_traceback, expect, settle
from test_hf_pages import MARIAN
from test_presentation_browser import in_viewport

pytestmark = pytest.mark.xdist_group("browser-views")  # what a page looks like: tests/browser_helpers.py

CASES = {"en-de": ("My+brother+lives+in+Berlin.", 6), "brown-lm": ("She+looked+at+him+and", 4), MARIAN: ("The+cat", 2)}
#: Font sizes (px) of every text of the lens table, as drawn.
SIZES_JS = """el => [...el.querySelectorAll('th, td div, .ae-lens-note')].filter(e => e.innerText.trim())
    .map(e => parseFloat(getComputedStyle(e).fontSize))"""


def layout(page) -> tuple[float, float, float]:
    """Where the list of next tokens stands under the Next button, and its height (px): unmoved by a scroll."""
    top_list, button = page.locator(".ae-topk").bounding_box(), page.get_by_role("button", name="Next").bounding_box()
    return top_list["y"] - button["y"], top_list["x"] - button["x"], top_list["height"]


@pytest.mark.parametrize("name", list(CASES))
def test_the_lens_on_translate_and_in_the_lab(hf_server, new_page, name):
    text, layers = CASES[name]
    page = new_page(PROJECTOR)
    page.goto(f"{hf_server}/?ckpt={name}&text={text}&step=2&lens=1&present=1")
    lens = page.locator(".ae-lens")
    lens.wait_for()
    settle(page)
    in_viewport(page, page.get_by_role("button", name="Next"), "the Next button")  # the step view still on top
    top_list = layout(page)
    expect(lens.locator("tr[data-layer]")).to_have_count(layers)
    lens.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    box, width = lens.bounding_box(), page.viewport_size["width"]
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 1, box
    sizes = lens.evaluate(SIZES_JS)
    assert sizes and min(sizes) >= 14, sorted(sizes)[:3]
    assert_no_traceback(page)
    page.screenshot(path=str(ARTIFACTS / f"lens-translate-{name}.png"))
    page.get_by_text("Logit lens", exact=True).click()  # off: the table goes, nothing above it moves
    expect(lens).to_have_count(0)
    settle(page)
    assert "lens=" not in page.url
    assert max(abs(a - b) for a, b in zip(layout(page), top_list, strict=True)) < 1

    page.goto(f"{hf_server}/decoding?ckpt={name}&text={text}&step=2&lens=1&present=1")
    page.get_by_text("Decoding lab", exact=True).first.wait_for()
    settle(page)
    page.get_by_role("tab", name="Logit lens").click()
    chart = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="Every step so far")
    chart.wait_for()
    chart.scroll_into_view_if_needed()
    page.wait_for_function("el => el.querySelector('.main-svg')", arg=chart.element_handle())
    expect(page.locator(".ae-lens tr[data-layer]")).to_have_count(layers)
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / f"lens-lab-{name}.png"))
