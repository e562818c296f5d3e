"""The Training page follows a live run in a real browser: what AppTest cannot show, since it reruns the whole script
where the served page only reruns its polling fragments (the live view, the runs table, heads forming).

A real tiny run is trained for a few steps and stopped, then resumed from the page: the page must show the new leg
as starting or running at once (not the stopped status.json of the leg before), enable Stop without a reload, keep
the runs table's step and the heads-forming snapshot moving with the trainer, and say this leg's minutes beside the
run's total. The runs folder is temporary (``ATTENTION_EXPLORER_RUNS``); a screenshot of the page at 1280×720 goes
to ``test-artifacts/training-live.png``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from training_page_helpers import wait_for

from benchmarks.app_server import CHROMIUM, ServerError, served_page
from launching import form as TF
from launching import launch as L
from training import runs as R

pytestmark = pytest.mark.xdist_group("browser")  # one browser test at a time (see browser_helpers.py)

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
if not Path(CHROMIUM).is_file():
    pytest.skip(f"Chromium not found at {CHROMIUM}; browser tests skipped", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
expect = sync_api.expect
expect.set_options(timeout=30_000)  # a busy 2-core machine draws the page's later elements seconds after its first

#: A tiny translator that trains until stopped (2-minute limit per leg), snapshots at steps 0, 10, 30, 100, 300, …
FORM = {
    **TF.preset_form("2-minute CPU demo"),
    "d_model": 32,
    "n_heads": 2,
    "layers": 1,
    "d_ff": 64,
    "max_steps": 100_000,
    "max_minutes": 2.0,
    "limit_train": 200,
    "eval_every": 100_000,
    "eval_sentences": 5,
    "vocab_size": 500,
    "warmup": 5,
    "log_every": 5,
    "threads": 1,
    "device": "cpu",
    "batch_tokens": 600,
}


@pytest.fixture
def stopped_run(tmp_path, monkeypatch):
    """A real run stopped after its step-10 snapshot: ``(runs root, run folder)``; stopped again at the end."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(L.DEMO_ENV, raising=False)
    run = L.launch(FORM, tmp_path, name="demo")
    try:
        assert wait_for(lambda: any(s.step >= 10 for s in R.read_probes(run)), 180), R.log_tail(run)
        assert L.stop(run)
        assert wait_for(lambda: L.run_state(run) == "stopped", 120), R.log_tail(run)
        yield tmp_path, run
    finally:
        L.stop(run)  # the resumed leg, if the test left it running
        wait_for(lambda: L.run_state(run) not in L.LIVE_STATES, 60)


def table_step(page) -> int:
    """The ``step`` cell of the runs table's first row, or -1 while there is none. The table is a static one
    (``st.table``, whose cells wrap), its header naming the columns."""
    table = page.locator('[data-testid="stTable"] table').first
    if not table.count():
        return -1
    header = [t.strip() for t in table.locator("thead th").all_inner_texts()]
    cells = [t.strip() for t in table.locator("tbody tr").first.locator("th, td").all_inner_texts()]
    if "step" not in header or len(cells) != len(header):
        return -1
    step = cells[header.index("step")]
    return int(step) if step.isdigit() else -1


def snapshot_step(page) -> int:
    text = page.get_by_text(re.compile(r"^Translation at step \d+")).first.inner_text()
    return int(re.search(r"step (\d+)", text).group(1))


def test_the_page_follows_a_resumed_run(stopped_run):
    root, run = stopped_run
    first_leg = R.read_status(run)
    try:
        with served_page(
            ARTIFACTS / "streamlit-training-live.log", {"ATTENTION_EXPLORER_RUNS": str(root)}, timeout_ms=60_000
        ) as (url, page):
            page.goto(f"{url}/training")
            page.get_by_text(re.compile(r"demo — state stopped")).wait_for()
            shown = snapshot_step(page)
            main = page.get_by_test_id("stMainBlockContainer")  # the header's "Stop" stops a script run
            stop = main.get_by_role("button", name="Stop", exact=True)
            expect(stop).to_be_disabled()

            main.get_by_role("button", name="Resume").click()
            # At once the new leg, never the old leg's "stopped": that status.json was taken for the new trainer's.
            expect(page.get_by_text(re.compile(r"demo — state (starting|running)"))).to_be_visible(timeout=15_000)
            expect(page.get_by_text(re.compile(r"demo — state running"))).to_be_visible(timeout=120_000)
            expect(stop).to_be_enabled(timeout=15_000)  # without a reload
            expect(
                page.get_by_text(re.compile(r"this leg [\d.]+ of 2 minutes · total [\d.]+ minutes")).first
            ).to_be_visible(timeout=15_000)

            # The runs table and heads forming keep up with the trainer (they were drawn once with the page).
            step = table_step(page)
            assert wait_for(lambda: table_step(page) > max(step, first_leg["step"]), 60), (step, table_step(page))
            assert wait_for(lambda: snapshot_step(page) > shown, 90), (shown, R.read_probes(run)[-1].step)
            page.wait_for_timeout(500)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "training-live.png"))

            stop.click()
            expect(page.get_by_text(re.compile(r"demo — state stopped"))).to_be_visible(timeout=120_000)
            assert page.locator('[data-testid="stException"]').count() == 0
    except ServerError as exc:
        pytest.fail(str(exc))
    status = R.read_status(run)
    assert status["leg"] == 2 and status["started"] == first_leg["started"]
