"""What a new user saw on small screens, in Debian's Chromium: Translate at 1280×720 with the far-from-training
warning and the logit lens (the sidebar open, and in presentation mode), Translate before its first step, and
Translate and Attention on a 390×844 phone. Same server, browser and helpers as ``browser_helpers.py``.

- 1280×720: the Next button, the step's ten next tokens and the lens toggle are on the first screen under the
  warning, even late in a long output; no piece of the next tokens or of the lens is cut ("▁Ko…").
- Before the first step the output box shows no translation (the class would read the answer before the steps
  that explain it); each step shows what is generated so far, Run to end all of it.
- 390×844 (a phone: its User-Agent says "Mobile"): Translate's step buttons stay one row, and from the Next button
  down one screen holds the ten next tokens and the cross-attention; the attribution view follows the step's view;
  the Attention page's heatmaps and Query · key charts write no label over another, and no chart title runs under
  the chart's toolbar.
Screenshots go to ``test-artifacts/small-*.png``.
"""

from __future__ import annotations

import re
from urllib.parse import quote_plus

import pytest
from browser_helpers import (
    ARTIFACTS,
    PROJECTOR,
    assert_no_traceback,
    click_and_wait_step,
    expect,
    open_translate,
    settle,
)
from test_presentation_browser import CHART_TEXTS_JS, in_viewport, overlapping

from ui.widgets import BEFORE_FIRST_STEP

pytestmark = pytest.mark.xdist_group("browser-views")  # what a page looks like: tests/browser_helpers.py

#: Nine words, eight of them cut into pieces by the shipped translator's vocabulary: the far-from-training warning.
FAR = "The+quarterly+earnings+exceeded+analysts+expectations+despite+inflationary+headwinds."
PHONE = (390, 844)
#: A phone's browser as it names itself (Chrome on Android).
PHONE_AGENT = (
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 "
    "Mobile Safari/537.36"
)
#: Texts (pieces, with their rank) of the next-token list and the lens table whose box is narrower than the text.
CUT_JS = """() => [...document.querySelectorAll('.ae-topk-piece, .ae-lens td div')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText)"""


@pytest.fixture
def phone_page(browser):
    """A page in a fresh phone-sized browser context with a phone's User-Agent; closed after the test."""
    context = browser.new_context(
        viewport={"width": PHONE[0], "height": PHONE[1]},
        device_scale_factor=1,
        is_mobile=True,
        has_touch=True,
        user_agent=PHONE_AGENT,
    )
    context.set_default_timeout(60_000)
    yield context.new_page()
    context.close()


def output_text(page) -> str:
    return page.locator(".ae-output-text").inner_text().strip()


# --- 1280×720 -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("present", [False, True], ids=["sidebar-open", "presentation"])
def test_next_the_ten_tokens_and_the_lens_toggle_fit_1280x720_under_the_warning(server, new_page, present):
    page = new_page(PROJECTOR)
    open_translate(page, server, f"?text={FAR}&lens=1&step=18" + ("&present=1" if present else ""))
    expect(page.locator('[data-testid="stAlertContentWarning"]', has_text="Far from what")).to_have_count(1)
    page.locator(".ae-lens").wait_for()
    for k in (19, 20):  # late in a long output: the output box is at its fullest
        click_and_wait_step(page, "Next", k)
    expect(page.locator('[data-testid="stSidebar"]')).to_have_attribute(
        "data-collapsed", "true" if present else "false"
    )
    in_viewport(page, page.get_by_role("button", name="Next"), "the Next button")
    rows = page.locator(".ae-topk-row")
    expect(rows).to_have_count(10)
    for i in range(10):
        in_viewport(page, rows.nth(i), f"next token {i + 1}")
    in_viewport(page, page.get_by_text("Logit lens", exact=True), "the lens toggle")
    in_viewport(page, page.locator(".ae-lens tr[data-layer]").first, "the lens's first layer")
    assert page.evaluate(CUT_JS) == []
    assert_no_traceback(page)
    page.screenshot(path=str(ARTIFACTS / f"small-translate-far-lens-1280x720{'-presentation' if present else ''}.png"))


def test_no_piece_is_cut_beside_an_open_sidebar(server, new_page):
    """A German compound among the next tokens: the list's piece column and the lens's cells show it whole."""
    page = new_page(PROJECTOR)
    open_translate(page, server, "?text=The+conference+participants+discussed+the+weather.&lens=1&step=1")
    page.locator(".ae-lens").wait_for()
    settle(page)
    longest = max(len(t) for t in page.locator(".ae-topk-piece").all_inner_texts())
    assert longest >= 8  # a piece long enough that a fixed column would have cut it
    assert page.evaluate(CUT_JS) == []


def test_before_the_first_step_the_translation_is_not_shown(server, new_page):
    page = new_page(PROJECTOR)
    open_translate(page, server, "?text=The+cat+sat+on+the+mat.")
    assert output_text(page) == BEFORE_FIRST_STEP
    page.get_by_role("button", name="Run to end").click()
    page.get_by_text(re.compile(r"Step [1-9]\d* of \d+")).wait_for()
    settle(page)
    whole = output_text(page)
    assert "Katze" in whole and "…" not in whole
    click_and_wait_step(page, "Reset", 0)
    for k in (1, 2):
        click_and_wait_step(page, "Next", k)
    partial = output_text(page)
    assert partial.endswith("…") and whole.startswith(partial.rstrip("… ").strip()), (partial, whole)
    assert len(partial) < len(whole)
    assert_no_traceback(page)


# --- a 390×844 phone ----------------------------------------------------------------------------------------------
def _boxes(locator) -> list[dict]:
    return [locator.nth(i).bounding_box() for i in range(locator.count())]


def test_translate_on_a_phone(server, phone_page):
    page = phone_page
    open_translate(page, server, "?text=The+cat+sat+on+the+mat.")
    for k in (1, 2, 3):
        click_and_wait_step(page, "Next", k)
    buttons = [page.get_by_role("button", name=n).bounding_box() for n in ("Reset", "Back", "Next", "Run to end")]
    assert max(b["y"] for b in buttons) - min(b["y"] for b in buttons) < 2, buttons  # one row
    assert all(b["x"] >= 0 and b["x"] + b["width"] <= PHONE[0] for b in buttons), buttons
    page.get_by_role("button", name="Next").evaluate("b => b.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)
    top = page.get_by_role("button", name="Next").bounding_box()["y"]
    assert top >= 0
    chips = page.get_by_text("Cross-attention of step 3", exact=False)
    shade = page.get_by_text("Shade = attention weight", exact=False)
    for what, box in (
        ("the ten next tokens", page.locator(".ae-topk").bounding_box()),
        ("the cross-attention heading", chips.bounding_box()),
        ("the cross-attention", shade.bounding_box()),
    ):
        assert box["y"] + box["height"] <= top + PHONE[1], (what, box, top)
    # nothing of the step view runs out of the screen's width, and no token label runs into another
    rows = _boxes(page.locator(".ae-topk-row"))
    assert all(r["x"] >= 0 and r["x"] + r["width"] <= PHONE[0] + 1 for r in rows), rows
    labels = [
        dict(text=t, **b)
        for t, b in zip(
            page.locator(".ae-topk-piece").all_inner_texts(), _boxes(page.locator(".ae-topk-piece")), strict=True
        )
    ]
    assert overlapping([dict(b, w=b["width"], h=b["height"]) for b in labels]) == []
    assert page.evaluate(CUT_JS) == []
    assert_no_traceback(page)
    page.screenshot(path=str(ARTIFACTS / "small-translate-390x844.png"))

    page.goto(f"{server}/?text=The+cat+sat+on+the+mat.&step=3&attr=1")  # the attribution view: right after it
    heading = page.get_by_text(re.compile(r"Step 3: what .* owes each piece"))
    heading.wait_for()
    settle(page)
    next_y = page.get_by_role("button", name="Next").bounding_box()["y"]
    generated = page.get_by_text("Generated so far", exact=False).bounding_box()["y"]
    assert heading.bounding_box()["y"] < generated  # before what explains the step
    assert heading.bounding_box()["y"] - next_y < 2 * PHONE[1], (heading.bounding_box(), next_y)
    assert_no_traceback(page)


@pytest.mark.parametrize("tab", ["Heads", "Query · key"])
def test_attention_on_a_phone(server, phone_page, tab):
    page = phone_page
    page.goto(f"{server}/attention?text=My+brother+lives+in+Berlin.&tab={quote_plus(tab)}")
    page.get_by_text("Translation:", exact=False).first.wait_for()
    settle(page)
    page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .main-svg').length >= 2")
    charts = page.locator('[data-testid="stPlotlyChart"]')
    for i in range(min(charts.count(), 3)):
        chart = charts.nth(i)
        chart.scroll_into_view_if_needed()
        page.wait_for_timeout(400)  # Plotly draws in the next frames
        box = chart.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE[0] + 1, box
        texts = [t for t in chart.evaluate(CHART_TEXTS_JS) if t["text"].strip()]
        assert len(texts) >= 8, texts
        assert overlapping(texts) == [], (tab, i)
        assert all(t["x"] >= box["x"] - 1 and t["x"] + t["w"] <= box["x"] + box["width"] + 1 for t in texts), [
            t for t in texts if t["x"] + t["w"] > box["x"] + box["width"] + 1
        ]
        # the title is clear of the chart's toolbars, which show at its top when the chart is touched
        chart.hover()
        page.wait_for_timeout(300)
        bars = [b for b in _boxes(page.locator('.modebar, [data-testid="stElementToolbar"]')) if b and b["width"]]
        title = [t for t in texts if t["y"] < box["y"] + 80 and t["size"] >= 16]
        assert title, texts
        assert (
            overlapping(title + [dict(text="toolbar", x=b["x"], y=b["y"], w=b["width"], h=b["height"]) for b in bars])
            == []
        ), (title, bars)
    assert_no_traceback(page)
    page.screenshot(
        path=str(ARTIFACTS / f"small-attention-{'heads' if tab == 'Heads' else 'qk'}-390x844.png"), full_page=True
    )
