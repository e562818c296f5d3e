"""What the browser shows agrees with what the page computes, after a run that stopped early (Chromium).

A new user typed an empty sentence on the Attention page of a link ``?kind=decoder&layer=3&head=2``, then a good
one: the heatmap showed decoder layer 3 head 2 while the controls above it read Encoder self, layer 1, all heads.
The run that stopped at the empty sentence never drew the controls, so the browser forgot them and drew them at
their first option; only a browser shows this (AppTest keeps no widget of its own).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.app_server import CHROMIUM, ServerError, served_page, settled

ROOT = Path(__file__).resolve().parent.parent
if not Path(CHROMIUM).is_file():
    pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)
if not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file():
    pytest.skip("checkpoints/en-de is missing", allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")

pytestmark = pytest.mark.xdist_group("browser")


def controls(page) -> tuple[str, str, str]:
    """The checked attention kind and what the Layer and Head boxes show, as a screen reader reads them."""
    snapshot = page.locator('[data-testid="stMain"]').aria_snapshot()
    kind = re.search(r'radio "([^"]+)" \[checked\]', snapshot)
    layer, head = (re.search(rf'combobox "{name}": ([^\n]+)', snapshot) for name in ("Layer", "Head"))
    return tuple(m.group(1).strip() if m else "" for m in (kind, layer, head))


def test_the_attention_controls_keep_their_link_values_after_an_empty_sentence():
    try:
        with served_page(ROOT / "test-artifacts" / "streamlit-link-state.log", viewport=(1280, 900)) as (url, page):
            page.goto(f"{url}/attention?kind=decoder&layer=3&head=2")
            settled(page, "Hover a cell")
            assert controls(page) == ("Decoder self (masked)", "layer 3", "head 2")
            box = page.get_by_label(re.compile("English sentence"))
            box.fill("")
            box.press("Enter")
            settled(page, "Please type a sentence")
            box.fill("The dog runs.")
            box.press("Enter")
            settled(page, "Hover a cell")
            page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
            assert "Decoder masked self-attention · layer 3 · head 2" in page.inner_text("body")
            assert controls(page) == ("Decoder self (masked)", "layer 3", "head 2")  # what the chart shows
            assert "kind=decoder" in page.url and "layer=3" in page.url and "head=2" in page.url
    except ServerError as exc:
        pytest.fail(str(exc))
