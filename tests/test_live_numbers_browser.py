"""The Worked examples page's live numbers in Chromium at 1280×720, in presentation mode, on the shipped translator
(encoder-decoder, our weights, the widest matrices: d_k 64) and on a tiny Hugging Face GPT-2 folder (decoder-only,
``tests/hf_fixtures.py``): the steps are drawn, the page's comparison with the Attention page's heatmap says ≤ 1e-6,
nothing is wider than the screen, and a head picked in the browser goes into the link. Screenshots go to
``test-artifacts/live-numbers-<checkpoint>.png``. The shipped language model and the tiny MarianMT folder draw the same
page: their numbers are checked in ``tests/test_live_numbers.py`` (AppTest); two more page loads here doubled
this module's CPU (23 CPU-seconds) for no layout of their own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.app_server import CHROMIUM, chromium, open_page, settled

pytestmark = pytest.mark.xdist_group("browser-views")  # what a page looks like: tests/browser_helpers.py

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
if not Path(CHROMIUM).is_file():
    pytest.skip(f"Chromium not found at {CHROMIUM}; browser tests skipped", allow_module_level=True)
if not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file():  # pragma: no cover
    pytest.skip("checkpoints/en-de is missing", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytest.importorskip("transformers")  # builds the Hugging Face folders

RUN_TIMEOUT_MS = 90_000
PROJECTOR = (1280, 720)


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.mark.parametrize("ckpt, heads", [("en-de", 6), ("gpt2-tiny", 4)])
def test_the_live_numbers_in_the_browser(hf_server, browser, ckpt, heads):
    page = open_page(browser, PROJECTOR, RUN_TIMEOUT_MS)
    try:
        page.goto(f"{hf_server}/lecture?numbers=live&present=1" + ("" if ckpt == "en-de" else f"&ckpt={ckpt}"))
        page.locator('[data-testid="stPlotlyChart"]:has-text("Scores")').first.wait_for(timeout=RUN_TIMEOUT_MS)
        settled(page, timeout_ms=RUN_TIMEOUT_MS)
        assert page.locator('[data-testid="stException"]').count() == 0
        caption = page.get_by_text("differs from these weights by at most").first.inner_text()
        assert float(re.search(r"at most ([0-9.e+-]+)", caption).group(1)) <= 1e-6
        for title in ("1. Scores", "4. Softmax per row", "5. Weights × V"):
            assert page.locator(f'[data-testid="stPlotlyChart"]:has-text("{title}")').count() == 1, title
        overflow = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollWidth")
        assert overflow <= PROJECTOR[0], overflow  # no chart or table wider than the projector
        page.get_by_role("combobox", name="Head").click()
        page.get_by_role("option", name=f"head {heads}").click()
        page.wait_for_url(re.compile(rf"[?&]head={heads}(&|$)"), timeout=RUN_TIMEOUT_MS)
        settled(page, timeout_ms=RUN_TIMEOUT_MS)
        assert page.locator('[data-testid="stException"]').count() == 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"live-numbers-{ckpt}.png"))
    finally:
        page.context.close()
