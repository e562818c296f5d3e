"""What the browser shows agrees with what the page computes, after a run that stopped early (Chromium).

A new user typed an empty sentence on the Attention page of a link ``?kind=decoder&layer=3&head=2``, then a good
one: the heatmap showed decoder layer 3 head 2 while the controls above it read Encoder self, layer 1, all heads.
The run that stopped at the empty sentence never drew the controls, so the browser forgot them and drew them at
their first option; only a browser shows this (AppTest keeps no widget of its own).
"""

from __future__ import annotations

import re
from urllib.parse import quote_plus

import pytest
from browser_helpers import BROWSER_GROUP
from training_page_helpers import wait_for

from benchmarks.app_server import settled

# The shared app and one Chromium for the module (conftest's server and new_page): each test here once started an
# app and a browser of its own, four app starts for what one serves.
pytestmark = BROWSER_GROUP


def controls(page) -> tuple[str, str, str]:
    """The checked attention kind and what the Layer and Head boxes show, as a screen reader reads them."""
    snapshot = page.locator('[data-testid="stMain"]').aria_snapshot()
    kind = re.search(r'radio "([^"]+)" \[checked\]', snapshot)
    layer, head = (re.search(rf'combobox "{name}": ([^\n]+)', snapshot) for name in ("Layer", "Head"))
    return tuple(m.group(1).strip() if m else "" for m in (kind, layer, head))


def test_the_attention_controls_keep_their_link_values_after_an_empty_sentence(server, new_page):
    page = new_page((1280, 900))
    page.goto(f"{server}/attention?kind=decoder&layer=3&head=2")
    settled(page, "Hover a cell")
    # On a loaded machine the radio's checked state reaches the accessibility tree a moment after the
    # page says it is done: the bug guarded against is a control that stays wrong, not one that is late.
    want = ("Decoder self (masked)", "layer 3", "head 2")  # what the link asks for
    assert wait_for(lambda: controls(page) == want, 10), controls(page)
    box = page.get_by_label(re.compile("English sentence"))
    box.fill("")
    box.press("Enter")
    settled(page, "Please type a sentence")
    box.fill("The dog runs.")
    box.press("Enter")
    settled(page, "Hover a cell")
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
    assert "Decoder masked self-attention · layer 3 · head 2" in page.inner_text("body")
    assert wait_for(lambda: controls(page) == want, 10), controls(page)  # what the chart shows
    assert "kind=decoder" in page.url and "layer=3" in page.url and "head=2" in page.url


LONG = (
    "Alice went to the market in the morning. She bought apples, pears and fresh bread for her mother, who was "
    "ill at home with a bad cold and a fever."
)


@pytest.mark.parametrize(
    "text, present",
    [(LONG, False), (LONG, True), ("The children play in the garden with the dog.", True)],
    ids=["long-output", "long-output-presenting", "two-line-output-presenting"],
)
def test_the_ten_next_tokens_stay_on_a_projectors_first_screen(server, new_page, text, present):
    """At 1280×720 the top-10 list fell below the screen under a four-line output (and, in presentation mode, under a
    two-line one): the output box now scrolls past three lines (two when presenting) and the status line heads the
    list, so the tenth token stays on the first screen."""
    page = new_page((1280, 720))
    page.goto(f"{server}/?text={quote_plus(text)}&step=3" + ("&present=1" if present else ""))
    settled(page, "Step 3 of")
    # the output box shows what is generated so far: at the last step, all of it
    page.get_by_role("button", name="Run to end").click()
    settled(page, "Step (\\d+) of \\1\\b", min_ms=300)
    rows = page.locator(".ae-topk-row")
    assert rows.count() == 10
    last = rows.nth(9).bounding_box()
    assert last["y"] + last["height"] <= 720, last
    if text == LONG:  # the rest of the long output is a scroll away
        assert page.locator(".ae-output-text").first.evaluate("e => e.scrollHeight > e.clientHeight")
