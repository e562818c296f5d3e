"""A visitor whose worker dies, in Debian's Chromium behind ``make serve``'s front (two workers and nginx through
:func:`deploy.serve.serving`): the visitor types a sentence and steps with Next (the link is never typed), the
worker that holds the session is killed with SIGKILL, and the page comes back on the other worker at the same page,
sentence and step, restored from the link the page kept current (``?text=…&step=…``), and a Next clicked while that
new session's first run is still going counts. The killed worker is started again by the supervisor, and new
visitors reach it again. Skipped where Chromium, nginx or the model is missing.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from browser_helpers import ARTIFACTS, assert_no_traceback, click_and_wait_step, expect, settle, step_of

from deploy.procs import healthy
from deploy.serve import WORKER_HEALTH

pytestmark = pytest.mark.xdist_group("browser")  # one app and one Chromium at a time (browser_helpers.py)

SENTENCE = "The cat sat on the mat."
#: How long the page may take to notice its worker is gone, reconnect and redraw (s).
RESTORE_S = 90

#: Notes when the title's element turns stale (the frontend marks the old page so when a new run starts; the old
#: page stays on screen meanwhile)
WATCH_TITLE = """() => {
  const isTitle = el => el.dataset && el.querySelector && [...el.querySelectorAll("h1")]
      .some(h => h.innerText.trim() === "Translate");
  const note = el => { if (el.dataset && el.dataset.stale === "true" && isTitle(el)) window.aeTitleWentStale = true; };
  window.aeTitleWentStale = false;
  new MutationObserver(changes => changes.forEach(c => {
      note(c.target);
      c.addedNodes.forEach(n => n.querySelectorAll &&
          [n, ...n.querySelectorAll("[data-stale]")].forEach(note));
  })).observe(document.body, {attributes: true, attributeFilter: ["data-stale"], childList: true, subtree: true});
}"""
#: ... and when the new run has drawn it again: the run has reached the page's fragment
TITLE_REDRAWN = """() => window.aeTitleWentStale && [...document.querySelectorAll('[data-stale="false"] h1')]
    .some(h => h.innerText.trim() === "Translate")"""


def _worker_of(page, cluster):
    """The worker the page's affinity cookie names (nginx sets it on the page's first answer)."""
    names = [c["value"] for c in page.context.cookies() if c["name"] == "ae_worker"]
    assert names, page.context.cookies()
    return next(w for w in cluster.workers if w.name == names[0])


def test_the_page_comes_back_on_another_worker_at_the_same_sentence_and_step(cluster, new_page):
    page = new_page((1280, 720))
    page.goto(cluster.url + "/")
    box = page.get_by_label("English sentence")
    box.wait_for()
    settle(page)
    box.fill(SENTENCE)
    box.press("Enter")
    page.get_by_text("Step 0 of", exact=False).wait_for()
    settle(page)
    for k in (1, 2, 3):
        click_and_wait_step(page, "Next", k)
    page.wait_for_url(re.compile(r"step=3"))
    assert "text=The+cat" in page.url or "text=The%20cat" in page.url, page.url
    dead = _worker_of(page, cluster)
    old_pid = dead.pid
    page.evaluate(WATCH_TITLE)
    os.kill(old_pid, signal.SIGKILL)

    # Streamlit's page reconnects through the front, which hands its websocket to the other worker and moves the
    # cookie there: a new session, drawn from the link. (The old page stays on screen meanwhile, so what it shows
    # proves nothing until then.)
    deadline = time.monotonic() + RESTORE_S
    while _worker_of(page, cluster) is dead:
        assert time.monotonic() < deadline, "the page never reconnected to the other worker"
        page.wait_for_timeout(100)
    # A Next clicked while the new session's first run is still going (the other worker has not served this model
    # yet: it loads it; the old page is on screen meanwhile) counts, as any click during a run does, once that run
    # has reached the page's fragment: the title, redrawn by the new run (no longer stale), says so. (Streamlit
    # drops a click on a fragment the session does not know yet: that moment, before the title, is not tested.)
    page.wait_for_function(TITLE_REDRAWN, timeout=RESTORE_S * 1000)
    assert page.locator('[data-testid="stStatusWidget"]').is_visible(), "the first run ended before the click"
    page.get_by_role("button", name="Next").click()
    page.get_by_text(re.compile(r"Step 4 of \d+")).wait_for(timeout=RESTORE_S * 1000)
    settle(page)
    # the new session started at step 3 (from the link: the step is no widget the browser could send back)
    expect(page.get_by_label("English sentence")).to_have_value(SENTENCE)
    assert "step=4" in page.url and step_of(page)[0] == 4
    expect(page.locator(".ae-topk")).to_have_count(1)
    assert_no_traceback(page)
    page.screenshot(path=str(ARTIFACTS / "failover-restored.png"))

    # the supervisor starts the killed worker again; new visitors (no cookie) reach it again
    deadline = time.monotonic() + RESTORE_S
    while not (dead.pid != old_pid and healthy(f"http://127.0.0.1:{dead.port}{WORKER_HEALTH}")):
        assert time.monotonic() < deadline, f"the killed worker was not restarted: {cluster.notes}"
        time.sleep(0.5)
    reached = set()
    while dead.name not in reached:
        assert time.monotonic() < deadline, f"no new visitor reached the restarted worker ({reached})"
        visitor = new_page((1280, 720))
        visitor.goto(cluster.url + "/")
        visitor.get_by_label("English sentence").wait_for()
        reached.add(_worker_of(visitor, cluster).name)
        visitor.context.close()
