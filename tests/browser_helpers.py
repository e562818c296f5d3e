"""What the browser tests share: the served app, Playwright's ``expect``, the viewports and the page helpers.

Importing this module skips the importing test module when Chromium, the shipped checkpoint or the ``playwright``
package is missing. The fixtures that use it (``server``, ``browser``, ``new_page``) are in ``conftest.py``.

Uses Debian's Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``) — never ``playwright install``, which
downloads. Screenshots go to ``test-artifacts/`` (git-ignored) for a human look: the first screen of each page,
or the whole page with ``ATTENTION_EXPLORER_FULL_SHOTS=1`` (see :func:`shot`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from benchmarks.app_server import CHROMIUM, ServerError, serve
from viz.theme import VALIDATE_ENV

#: The mark of the browser tests that click and wait (steps, bursts, runs, a killed worker). make test runs three
#: xdist workers (--dist loadgroup): these share one, one after another. The tests of what a page looks like (layout,
#: readability, labels at a size: no click races a clock) are the group "browser-views", which another worker takes
#: beside the unit tests: the one browser group was the suite's critical path (605 of its 613 s).
BROWSER_GROUP = pytest.mark.xdist_group("browser")

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"

if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"Chromium not found at {CHROMIUM} (Debian: apt-get install -y chromium); browser tests skipped",
        allow_module_level=True,
    )
if not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file():  # pragma: no cover
    pytest.skip("checkpoints/en-de is missing", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
expect = sync_api.expect
#: Playwright's assertions wait 5 s by default; on a 2-core machine running the other tests beside these, a page's
#: first chart (Plotly's JavaScript loads on first use) can take longer to appear.
expect.set_options(timeout=30_000)

RUN_TIMEOUT_MS = 60_000  # one script run (model load + decode) on a busy 2-core machine
DESKTOP = (1600, 1000)
PROJECTOR = (1280, 720)


# --- the server -----------------------------------------------------------------------------------------------
def serve_app(env_overrides: dict[str, str], log_name: str):
    """The app on a free port (:func:`benchmarks.app_server.serve`), building its figures as the served app does:
    without Plotly's validation, which the test process turns on for the figures its own tests build (a served app
    inherited it, so the browser saw figures no visitor gets, built up to hundreds of times slower). Yields the base
    URL."""
    try:
        with serve(ARTIFACTS / log_name, {VALIDATE_ENV: "0", **env_overrides}) as url:
            yield url
    except ServerError as exc:
        pytest.fail(str(exc))


# --- helpers -------------------------------------------------------------------------------------------
def settle(page, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """Wait until Streamlit has finished the current script run (the "Running…" status widget is gone)."""
    page.wait_for_timeout(250)  # a click's rerun takes a moment to start
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=timeout_ms)
    page.wait_for_timeout(200)


def assert_no_traceback(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0
    body = page.inner_text("body")
    assert "Traceback" not in body, body[:2000]


def expect_step_view(page) -> None:
    """A step of the Translate view is drawn: the next-token list and the alignment map (both HTML: the page loads
    no Plotly)."""
    expect(page.locator(".ae-topk")).to_have_count(1, timeout=RUN_TIMEOUT_MS)
    expect(page.locator(".ae-align").filter(has_text="Alignment so far")).to_have_count(1, timeout=RUN_TIMEOUT_MS)
    expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(0)


def open_translate(page, url: str, query: str = "") -> None:
    page.goto(f"{url}/{query}")
    page.get_by_text(re.compile(r"Step \d+ of \d+")).wait_for()
    settle(page)


def step_of(page) -> tuple[int, int]:
    text = page.get_by_text(re.compile(r"Step \d+ of \d+")).inner_text()
    m = re.search(r"Step (\d+) of (\d+)", text)
    return int(m.group(1)), int(m.group(2))


def click_and_wait_step(page, label: str, expected_step: int | None = None) -> None:
    page.get_by_role("button", name=label).click()
    if expected_step is not None:
        page.get_by_text(re.compile(rf"Step {expected_step} of \d+")).wait_for()
    settle(page)


#: Set (to 1) for full-page screenshots: every shot then shows the whole page, for a person reviewing the pages.
FULL_SHOTS_ENV = "ATTENTION_EXPLORER_FULL_SHOTS"


def shot(page, name: str) -> Path:
    """A screenshot in ``test-artifacts/``: what the viewport shows (the first screen, as a projector shows it), or
    with ``ATTENTION_EXPLORER_FULL_SHOTS=1`` the whole page.

    The whole page costs Chromium more than the page's load: Streamlit scrolls inside its main container, not the
    document, so a plain ``full_page=True`` stops at the viewport, and the viewport is stretched to the content
    height (up to 8,000 px) for the shot, which lays out and rasterizes that height in software and redraws every
    Plotly chart twice (3.4-7.2 CPU-seconds a shot on this 2-core machine, against 0.2 for the viewport; the suite
    takes ~35 of them)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    whole = os.environ.get(FULL_SHOTS_ENV, "") not in ("", "0")
    viewport = page.viewport_size
    if whole:
        height = page.evaluate(
            "() => Math.max(...['stMain', 'stAppViewContainer', 'stSidebarContent']"
            '.map(id => document.querySelector(`[data-testid="${id}"]`))'
            ".filter(Boolean).map(el => el.scrollHeight), document.documentElement.scrollHeight)"
        )
        page.set_viewport_size({"width": viewport["width"], "height": max(viewport["height"], min(int(height), 8000))})
        page.wait_for_timeout(700)  # Plotly re-lays out on resize
    page.screenshot(path=str(path), full_page=whole)
    if whole:
        page.set_viewport_size(viewport)
    assert path.stat().st_size > 10_000
    return path


def pick(page, label: str, option: str) -> None:
    """Choose ``option`` in the Streamlit selectbox labelled ``label`` as a person does: open it, click the item."""
    box = page.get_by_role("combobox", name=label, exact=True)
    expect(box).to_have_count(1, timeout=RUN_TIMEOUT_MS)  # a box redrawn for other options replaces the old one
    box.click()
    page.get_by_role("option", name=option, exact=True).click()
    settle(page)
