"""Presentation mode and the Translate step view in a real browser (issue 14, "readable from the back of the room").

A lecturer clicks Next in front of a class at 1280×720: the output, the step buttons and the cross-attention of
the current token must be on screen together, without scrolling; in presentation mode the charts' axis labels
are at least 14 px as drawn, and the sidebar is collapsed. Same server, browser and helpers as
``test_e2e_browser.py`` (Debian's Chromium; skipped where it or the model is missing).
"""

from __future__ import annotations

import pytest

from test_e2e_browser import (ARTIFACTS, PROJECTOR, assert_no_traceback, browser, click_and_wait_step, expect,  # noqa: F401
                              new_page, open_translate, server, settle)

FULL_HD = {"width": 1920, "height": 1080}
#: Tick labels of every Plotly chart as the browser draws them (computed font size, px).
TICK_SIZES_JS = """() => [...document.querySelectorAll(
    '.js-plotly-plot .xtick text, .js-plotly-plot .ytick text, .js-plotly-plot .g-xtitle text, .js-plotly-plot .g-ytitle text')]
    .map(t => parseFloat(getComputedStyle(t).fontSize))"""


def in_viewport(page, locator, what: str) -> None:
    """``locator`` (one element) lies wholly inside the viewport: seen without scrolling."""
    expect(locator).to_have_count(1)
    box = locator.bounding_box()
    view = page.viewport_size
    assert box is not None, what
    assert box["x"] >= 0 and box["y"] >= 0, (what, box)
    assert box["x"] + box["width"] <= view["width"] + 1 and box["y"] + box["height"] <= view["height"] + 1, \
        (what, box, view)


@pytest.mark.parametrize("viewport, present", [(PROJECTOR, True), (PROJECTOR, False), (FULL_HD, True)],
                         ids=["1280x720-presentation", "1280x720-normal", "1920x1080-presentation"])
def test_translate_step_view_fits_the_screen(server, new_page, viewport, present):
    page = new_page(viewport)
    open_translate(page, server, "?text=The+cat+sat+on+the+mat." + ("&present=1" if present else ""))
    for k in (1, 2, 3):
        click_and_wait_step(page, "Next", k)
    page.wait_for_timeout(500)  # Plotly draws after the run
    sidebar = page.locator('[data-testid="stSidebar"]')
    expect(sidebar).to_have_attribute("data-collapsed", "true" if present else "false")

    in_viewport(page, page.locator(".ae-output"), "the output box")
    in_viewport(page, page.get_by_role("button", name="Next"), "the Next button")
    in_viewport(page, page.get_by_role("button", name="Back"), "the Back button")
    in_viewport(page, page.get_by_text("Cross-attention of step 3", exact=False), "the cross-attention heading")
    alignment = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="Alignment so far")
    in_viewport(page, alignment, "the cross-attention chart")

    sizes = page.evaluate(TICK_SIZES_JS)
    assert sizes, "no axis labels found"
    if present:
        assert min(sizes) >= 14, sorted(sizes)[:5]
    assert_no_traceback(page)
    name = f"presentation-translate-{viewport['width']}x{viewport['height']}{'' if present else '-normal'}.png"
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
