"""What only a browser can see of the readability walk: the Translate alignment's upright source labels, as laid out
by Chromium at 1280×720, stand apart and whole for a 26-piece source. Figure-level checks of the same rule are in
``test_attention_readability.py``; same server, browser and helpers as ``browser_helpers.py`` (Debian's
Chromium; skipped where it or the model is missing).
"""

from __future__ import annotations

import pytest
from browser_helpers import ARTIFACTS, PROJECTOR, assert_no_traceback, open_translate

pytestmark = pytest.mark.xdist_group("browser-views")  # what a page looks like: tests/browser_helpers.py

#: 25 pieces and <eos> for the shipped translator (its 16k vocabulary).
LONG = (
    "Although+it+was+raining+heavily,+the+children+played+football+in+the+park+until+their+parents+called+them+"
    "home+for+a+late+dinner."
)

#: Each source label's box as drawn (the upright text, not its narrow column), with its text and tier.
LABEL_BOXES_JS = """() => [...document.querySelectorAll('.ae-align th.ae-align-col')].map(th => {
  const text = th.querySelector('div[style*="writing-mode"]');
  const r = text.getBoundingClientRect();
  return {text: text.innerText, tier: +th.dataset.tier, x0: r.left, x1: r.right, y0: r.top, y1: r.bottom,
          whole: text.scrollHeight <= text.clientHeight + 1 && text.scrollWidth <= text.clientWidth + 1};
})"""


@pytest.mark.parametrize("present", [False, True], ids=["normal", "presentation"])
def test_the_alignment_labels_of_a_long_source_stand_apart_at_1280(server, new_page, present):
    """At 1280 px the 26 source labels, each a line wide in an ~11 px column, ran into one another."""
    page = new_page(PROJECTOR)
    open_translate(page, server, f"?text={LONG}&step=5" + ("&present=1" if present else ""))
    page.locator(".ae-align").filter(has_text="Alignment so far").wait_for()
    page.wait_for_timeout(300)
    boxes = page.evaluate(LABEL_BOXES_JS)
    assert len(boxes) == 26 and all(b["whole"] and b["text"] for b in boxes), boxes
    for a in boxes:
        for b in boxes:
            if a is not b:
                apart = a["x1"] <= b["x0"] + 0.5 or b["x1"] <= a["x0"] + 0.5
                assert apart or a["y1"] <= b["y0"] or b["y1"] <= a["y0"], (a, b)
    view = page.viewport_size["width"]
    assert min(b["x0"] for b in boxes) >= 0 and max(b["x1"] for b in boxes) <= view
    assert_no_traceback(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".ae-align").filter(has_text="Alignment so far").screenshot(
        path=str(ARTIFACTS / f"alignment-26-pieces-1280{'-presentation' if present else ''}.png")
    )
