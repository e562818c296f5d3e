"""Lecture-ready, in a real browser (the shared app and Chromium of ``conftest.py``): a burst of Next clicks counts
every click and never crashes, Enter in the sentence box applies the sentence, a link restores the Translate and
Attention views."""

from __future__ import annotations

import re

import pytest
from browser_helpers import (
    BROWSER_GROUP,
    DESKTOP,
    RUN_TIMEOUT_MS,
    assert_no_traceback,
    click_and_wait_step,
    expect,
    open_translate,
    pick,
    settle,
    shot,
    step_of,
    sync_api,
)

pytestmark = BROWSER_GROUP


# --- lecture-ready -------------------------------------------------------------------------------------------
def _shown_step(page, lab: bool) -> int:
    """The step the page shows: "Step N of M" on Translate, "Step N · …" in the Decoding lab."""
    pattern = r"Step (\d+) ·" if lab else r"Step (\d+) of \d+"
    return int(re.search(pattern, page.get_by_text(re.compile(pattern)).first.inner_text()).group(1))


STEP_IN_LINK_JS = "(k) => new RegExp('[?&]step=' + k + '(&|$)').test(window.location.search)"


@pytest.mark.parametrize("path", ["", "decoding"], ids=["translate", "decoding-lab"])
def test_a_burst_of_next_clicks_counts_every_click_and_never_crashes(server, new_page, path):
    """Six clicks on Next, twice, each 0.3 s after the previous one reached the server: each click's script run
    starts while the previous one may still be running (Streamlit's fast reruns). Before, runs stepping one shared
    Stepper crashed ("Expected tensor for argument #1 'indices' … got torch.FloatTensor", buttons gone) and clicks
    were lost (6 clicks, step 2)."""
    page = new_page(DESKTOP)
    lab = path == "decoding"
    for burst in range(2):
        page.goto(f"{server}/{path}?text=The+cat+sat+on+the+mat.")
        page.get_by_text(re.compile(r"Step 0 ·" if lab else r"Step 0 of \d+")).first.wait_for()
        settle(page)
        last = 6 if lab else min(6, step_of(page)[1])
        next_button = page.get_by_role("button", name="Next")
        for k in range(1, 7):
            # force: as a person clicks, without waiting for the page to look settled (the busy test machine
            # keeps Playwright's "stable" check waiting while Plotly draws)
            next_button.click(force=True)
            # Two clicks on one button that reach the server before a script run has taken the first are merged
            # into one by Streamlit (its rerun requests coalesce), which a loaded machine makes likely at 0.3 s.
            # So the next click waits until this one's run has moved the link's step (its callback has run),
            # not until that run is over: it still lands in a running script, the case that crashed.
            page.wait_for_function(STEP_IN_LINK_JS, arg=min(k, last), timeout=RUN_TIMEOUT_MS)
            page.wait_for_timeout(300)
        settle(page)
        page.wait_for_timeout(1000)
        settle(page)
        exceptions = page.locator('[data-testid="stException"]')
        assert exceptions.count() == 0, (burst, exceptions.first.inner_text())
        expect(page.get_by_role("button", name="Back")).to_be_visible()
        expected = last
        try:  # the last click's run may still be finishing on a loaded machine; a lost click never arrives
            page.wait_for_url(re.compile(rf"[?&]step={expected}(&|$)"), timeout=10_000)
        except sync_api.TimeoutError:
            pass
        assert _shown_step(page, lab) == expected, burst
        assert f"step={expected}" in page.url
        assert_no_traceback(page)
    shot(page, f"burst-{'lab' if lab else 'translate'}.png")


def test_enter_in_the_sentence_box_applies_the_sentence(server, new_page):
    """The sentence box is one line: Enter translates what was typed (a text area added a newline instead), and
    the presets box then says the sentence is the user's own."""
    page = new_page(DESKTOP)
    open_translate(page, server, "?text=The+cat+sat+on+the+mat.")
    expect(page.get_by_role("combobox", name="Lecture presets")).to_have_value("The cat sat on the mat.")
    box = page.get_by_label("English sentence")
    box.fill("I like my bike.")
    box.press("Enter")
    page.wait_for_url(re.compile(r"text=I\+like\+my\+bike"))
    settle(page)
    expect(box).to_have_value("I like my bike.")  # no newline
    expect(page.get_by_role("combobox", name="Lecture presets")).to_have_value("— your own sentence —")
    assert step_of(page)[0] == 0
    assert_no_traceback(page)
    shot(page, "translate-own-sentence.png")


def _selectbox_value(page, label: str) -> str:
    """The option a Streamlit selectbox shows."""
    return page.get_by_role("combobox", name=label, exact=True).input_value()


def _reopen(page, new_page, wait_text: str | re.Pattern):
    """The page's current link opened in a fresh browser context (no session, no cookies)."""
    link = page.url
    other = new_page(DESKTOP)
    other.goto(link)
    other.get_by_text(wait_text).first.wait_for()
    settle(other)
    return other, link


def test_a_link_restores_the_translate_and_attention_views(server, new_page):
    """Every control that changes the drawing is in the link: a fresh browser context on that link shows the same
    view (Translate: sentence, step, layer, head; Attention: kind, layer, head, word level, tab, query and key)."""
    page = new_page(DESKTOP)
    open_translate(page, server, "?text=The+cat+sat+on+the+mat.")
    for k in (1, 2):
        click_and_wait_step(page, "Next", k)
    pick(page, "Layer", "decoder layer 1")
    pick(page, "Head", "head 2")
    shown = (step_of(page), _selectbox_value(page, "Layer"), _selectbox_value(page, "Head"))
    assert shown[1:] == ("decoder layer 1", "head 2")
    page.wait_for_url(re.compile(r"[?&]head=2(&|$)"))  # the rerun writes the link after drawing the box
    other, link = _reopen(page, new_page, re.compile(r"Step \d+ of \d+"))
    assert (step_of(other), _selectbox_value(other, "Layer"), _selectbox_value(other, "Head")) == shown, link
    expect(other.get_by_label("English sentence")).to_have_value("The cat sat on the mat.")
    assert_no_traceback(other)

    page.goto(f"{server}/attention?text=The+cat+sat+on+the+mat.&tab=Tokens+%26+lines")
    page.get_by_text("Query token (a row)").wait_for()
    settle(page)
    page.get_by_role("radio", name="Encoder self").check(force=True)
    settle(page)
    pick(page, "Layer", "layer 2")
    pick(page, "Head", "head 3")
    page.get_by_text("Word level").click()
    settle(page)
    pick(page, "Query token (a row)", "2: ▁sat")
    pick(page, "Key token (a column)", "1: ▁cat")
    labels = ("Layer", "Head", "Query token (a row)", "Key token (a column)")
    shown = [_selectbox_value(page, label) for label in labels]
    assert shown == ["layer 2", "head 3", "2: ▁sat", "1: ▁cat"]
    page.wait_for_url(re.compile(r"[?&]key=1(&|$)"))  # under load the link is written a moment after the box shows
    other, link = _reopen(page, new_page, "Query token (a row)")
    assert [_selectbox_value(other, label) for label in labels] == shown, link
    expect(other.get_by_role("radio", name="Encoder self")).to_be_checked()
    expect(other.get_by_role("switch", name="Word level")).to_be_checked()
    expect(other.get_by_role("tab", name="Tokens & lines")).to_have_attribute("aria-selected", "true")
    assert_no_traceback(other)
    shot(other, "attention-from-link.png")
