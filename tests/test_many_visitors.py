"""Eight visitors at once (a lecture room's laptops on one server): eight browser contexts step different sentences
on both shipped checkpoints, their clicks interleaved, and each sees only its own sentence, step and step count.

The server caches the model and each sentence's decoding across sessions (``st.cache_resource``); what a session
shows must come from its own state only. Expected step counts are computed in this process with the same greedy
decoding the page runs (:func:`ui.state.new_stepper`).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote_plus

import pytest

from benchmarks.app_server import CHROMIUM, chromium, open_page

ROOT = Path(__file__).resolve().parent.parent
if not Path(CHROMIUM).is_file():
    pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)
if not all((ROOT / "checkpoints" / name / "model.safetensors").is_file() for name in ("en-de", "brown-lm")):
    pytest.skip("a shipped checkpoint is missing", allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")

from decoding.stepping import input_limit, prepare_source
from model.checkpoint import load_checkpoint
from ui.state import new_stepper

#: make test runs two xdist workers (--dist loadgroup): the browser tests share one, one after another — two apps
#: and two Chromiums at once on a 2-core machine slow clicks enough to break timing-sensitive tests.
pytestmark = pytest.mark.xdist_group("browser")

TIMEOUT_MS = 180_000  # eight sessions share two busy cores
VISITORS = [
    ("en-de", "The cat sat on the mat."),
    ("en-de", "Bobby likes blackberries."),
    ("en-de", "Where is the station?"),
    ("en-de", "I am hungry."),
    ("brown-lm", "The jury said"),
    ("brown-lm", "In the morning"),
    ("brown-lm", "He was"),
    ("brown-lm", "The city of"),
]
ROUNDS = 2  # two interleaved rounds already overlap eight sessions; each more costs ~20 s on CI


def expected_steps(ckpt_name: str, text: str) -> int:
    """How many tokens the page's greedy decoding of ``text`` generates (the N of "Step k of N")."""
    ckpt = load_checkpoint(ROOT / "checkpoints" / ckpt_name)
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)
    stepper = new_stepper(ckpt.model, list(src.ids))
    stepper.run_to_end()
    return len(stepper.records)


def shown_step(page) -> tuple[int, int]:
    m = re.search(r"Step (\d+) of (\d+)", page.inner_text("body"))
    return (int(m.group(1)), int(m.group(2))) if m else (-1, -1)


def test_eight_visitors_stepping_at_once_each_see_only_their_own_state(server):
    totals = [expected_steps(name, text) for name, text in VISITORS]
    assert all(n >= ROUNDS for n in totals), totals
    with chromium() as browser:
        pages = []
        for name, text in VISITORS:
            page = open_page(browser, (1280, 720), TIMEOUT_MS)
            page.goto(f"{server}/?ckpt={name}&text={quote_plus(text)}", wait_until="commit")
            pages.append(page)
        for page in pages:  # all eight loaded concurrently; now wait for each
            page.get_by_text(re.compile(r"Step 0 of \d+")).wait_for()
        for k in range(1, ROUNDS + 1):
            for page in pages:  # every visitor clicks before any waits: the reruns overlap on the server
                page.get_by_role("button", name="Next").click(no_wait_after=True)
            for page in pages:
                page.get_by_text(re.compile(rf"Step {k} of \d+")).wait_for()
        for page, (name, text), total in zip(pages, VISITORS, totals, strict=True):
            page.wait_for_timeout(300)
            assert shown_step(page) == (ROUNDS, total), (name, text, page.url)
            assert page.get_by_label(re.compile("sentence|prompt", re.I)).first.input_value() == text, (name, text)
            assert f"ckpt={name}" in page.url or name == "en-de", page.url
            assert page.locator('[data-testid="stException"]').count() == 0, (name, text)
            assert "Traceback" not in page.inner_text("body"), (name, text)
        browser.close()
