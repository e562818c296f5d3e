"""End-to-end tests in a real browser: the app served by ``streamlit run``, driven with Playwright + Chromium.

Screenshots go to ``test-artifacts/`` (git-ignored) for a human look:
``translate-step3.png`` and ``attention.png`` at 1600×1000, ``projector-run-to-end.png`` at 1280×720.
``training-finished.png``: a language-model run launched from the Training page and watched to its end;
``training-live.png``: a stopped run resumed from the page and followed live (their runs folder is temporary:
``ATTENTION_EXPLORER_RUNS``).
As in ``test_app.py``, nothing asserts particular German words: the model is a placeholder for now.
"""

from __future__ import annotations

import re

import pytest
from browser_helpers import (
    BROWSER_GROUP,
    DESKTOP,
    PROJECTOR,
    RUN_TIMEOUT_MS,
    assert_no_traceback,
    click_and_wait_step,
    expect,
    expect_step_view,
    open_translate,
    pick,
    serve_app,
    settle,
    shot,
    step_of,
)
from training_page_helpers import LONG, wait_for

from launching import form as TF
from launching import launch as L
from training import runs as R

pytestmark = BROWSER_GROUP


@pytest.fixture(scope="module")
def fresh_server(tmp_path_factory):
    """An app no one has visited yet (the shared ``server`` has served other modules' tests), its runs folder in a
    temporary directory (``ATTENTION_EXPLORER_RUNS``): ``(url, runs_root, visits)``, ``visits`` the tests that
    have used it. The deep-link test is the first in this module and says so; the Training page's tests come last:
    the first launches a run from the page, the second resumes one it launched itself (one app for them all: a server
    start costs seconds of CPU)."""
    runs = tmp_path_factory.mktemp("browser-runs")
    for url in serve_app({"ATTENTION_EXPLORER_RUNS": str(runs)}, "streamlit-fresh-server.log"):
        yield url, runs, []


# --- tests ----------------------------------------------------------------------------------
def test_deep_link_as_first_visit_shows_the_full_app(fresh_server, new_page):
    """A fresh server whose first visitor opens /attention directly still runs app.py (sidebar, model)."""
    url, _, visits = fresh_server
    assert not visits, f"the app was visited before this first visit, by {visits}: keep this test first here"
    visits.append("deep link")
    page = new_page()
    page.goto(f"{url}/attention?text=The+cat+sat+on+the+mat.")
    page.get_by_text("Hover a cell for the pair").wait_for()
    settle(page)
    sidebar = page.locator('[data-testid="stSidebar"]')
    expect(sidebar.get_by_text("Attention Explorer", exact=True)).to_be_visible()
    expect(sidebar.get_by_text("Checkpoint", exact=True)).to_be_visible()
    expect(page.get_by_text("No model is available")).to_have_count(0)
    expect(page.locator('[data-testid="stPlotlyChart"]').first).to_be_visible()
    assert_no_traceback(page)


def test_translate_three_steps_then_attention_page(server, new_page):
    page = new_page(DESKTOP)
    open_translate(page, server)
    assert step_of(page)[0] == 0
    expect(page.get_by_label("English sentence")).to_have_value("My brother lives in Berlin.")  # a one-line box
    for k in (1, 2, 3):
        click_and_wait_step(page, "Next", k)
    step, total = step_of(page)
    assert step == 3 and total >= 3
    expect(page.get_by_text(re.compile(r"Step 3 of \d+"))).to_be_visible()
    expect(page.get_by_role("button", name="Back")).to_be_enabled()
    expect_step_view(page)
    assert "step=3" in page.url
    assert_no_traceback(page)
    page.wait_for_timeout(500)  # let Plotly finish drawing
    shot(page, "translate-step3.png")

    page.locator('[data-testid="stSidebarNav"] a', has_text="Attention").click()
    page.get_by_text("Hover a cell for the pair").wait_for()
    settle(page)
    expect(page.locator('[data-testid="stPlotlyChart"]').first).to_be_visible()
    assert "/attention" in page.url
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, "attention.png")


def test_projector_run_to_end(server, new_page):
    page = new_page(PROJECTOR)
    open_translate(page, server)
    page.get_by_role("button", name="Run to end").click()
    page.get_by_text(re.compile(r"Step [1-9]\d* of \d+")).wait_for()
    settle(page)
    step, total = step_of(page)
    assert step == total >= 1
    expect(page.get_by_role("button", name="Next")).to_be_disabled()
    expect_step_view(page)
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, "projector-run-to-end.png")


def test_empty_text_shows_a_warning(server, new_page):
    page = new_page(DESKTOP)
    open_translate(page, server)
    box = page.get_by_label("English sentence")
    box.fill("")
    box.press("Enter")
    page.get_by_text("Please type a sentence (the text is empty).").wait_for()
    settle(page)
    expect(page.locator('[data-testid="stAlertContentWarning"]')).to_have_count(1)
    expect(page.get_by_role("button", name="Next")).to_have_count(0)
    assert_no_traceback(page)

    box.fill("I love 🍕 and 🎉")
    box.press("Enter")
    page.get_by_text("Characters the model never saw").wait_for()
    settle(page)
    expect(page.get_by_role("button", name="Next")).to_be_visible()
    assert_no_traceback(page)

    # biochemistry: translated, under a warning that names the words the vocabulary had to cut
    box.fill("Mitochondrial enzymes catalyse the oxidation of pyruvate.")
    box.press("Enter")
    warning = page.locator('[data-testid="stAlertContentWarning"]', has_text="Far from what this model has seen")
    warning.wait_for()
    settle(page)
    expect(warning).to_contain_text("“Mitochondrial”")
    expect(page.get_by_role("button", name="Next")).to_be_visible()
    box.fill("The cat sat on the mat.")  # a familiar sentence: the warning goes
    box.press("Enter")
    expect(page.get_by_text("Source pieces", exact=False)).to_be_visible()  # step 0: no translation shown yet
    settle(page)
    expect(page.locator('[data-testid="stAlertContentWarning"]')).to_have_count(0)
    assert_no_traceback(page)


def test_decoding_lab_sample_force_and_beam(server, new_page):
    """The lab in a browser: a seeded sampling link replays, a forced token makes a branch, beam draws its tree."""
    page = new_page(DESKTOP)
    page.goto(f"{server}/decoding?strategy=sample&temperature=0.8&top_p=0.9&seed=3&step=3")
    page.get_by_text("Decoding lab", exact=True).first.wait_for()
    page.get_by_text(re.compile(r"Step 3\b")).first.wait_for()
    settle(page)
    expect(page.locator('[data-testid="stPlotlyChart"]').first).to_be_visible()
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, "decoding-sample.png")

    page.get_by_role("button", name="Force this token").click()
    page.get_by_text("Branches", exact=True).wait_for()
    settle(page)
    assert "forced=" in page.url
    assert_no_traceback(page)

    page.goto(f"{server}/decoding?strategy=beam&beam=4")
    page.get_by_text("Decoding lab", exact=True).first.wait_for()
    settle(page)
    expect(page.locator('[data-testid="stPlotlyChart"]').first).to_be_visible()
    assert_no_traceback(page)
    # Beam search steps like the other rules: Next grows the tree and puts the step in the link.
    page.get_by_role("button", name="Next").click()
    page.get_by_text(re.compile(r"Step 1: the 8 candidates considered")).wait_for()
    settle(page)
    assert "step=1" in page.url
    page.get_by_role("button", name="Run to end").click()
    page.get_by_text("Final ranking, best first", exact=False).wait_for()
    settle(page)
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, "decoding-beam.png")


def test_a_loop_and_the_loop_guard_on_a_projector(server, new_page):
    """A sentence the translator loops on: the Translate page explains the loop and shows the guarded translation;
    the Decoding lab's loop guard, switched on by a person, says at step 14 which token it kept from the rule (a
    third "nur" after "… die nicht nur nur")."""
    looping = (
        "No+child+should+ever+have+to+grow+up+in+an+environment+that+is+not+nurturing,+caring,+and+"
        "educational,+but+they+do."
    )
    page = new_page(PROJECTOR)
    open_translate(page, server, f"?text={looping}")
    page.get_by_role("button", name="Run to end").click()  # the note comes with the loop, not before it is written
    page.get_by_text("With the loop guard").wait_for()
    assert_no_traceback(page)
    shot(page, "translate-loop-guard.png")
    page.goto(f"{server}/decoding?text={looping}&step=14")
    page.get_by_text(re.compile(r"Step 14\b")).first.wait_for()
    settle(page)
    page.get_by_text("Loop guard", exact=True).click()
    page.get_by_text("The loop guard kept", exact=False).wait_for()
    settle(page)
    assert "guard=1" in page.url
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, "decoding-loop-guard.png")


def test_a_student_switches_to_the_language_model_and_steps_through_a_prompt(server, new_page):
    page = new_page(DESKTOP)
    open_translate(page, server)
    pick(page, "Checkpoint", "brown-lm")
    page.get_by_text("English prompt (the model continues it)").wait_for()
    assert "ckpt=brown-lm" in page.url
    prompt = "The animal didn't cross the street because it"
    pick(page, "Lecture presets", prompt)
    expect(page.get_by_label("English prompt (the model continues it)")).to_have_value(prompt)
    for k in (1, 2, 3):
        click_and_wait_step(page, "Next", k)
    expect(page.get_by_text("Masked self-attention of step 3", exact=False)).to_be_visible()
    banner = page.locator('[data-testid="stMarkdownContainer"] > div').filter(has_text=prompt).first.inner_text()
    assert banner.startswith(prompt) and len(banner) > len(prompt) + 3  # the prompt, then its continuation
    captions = " ".join(page.locator('[data-testid="stMain"] [data-testid="stCaptionContainer"]').all_inner_texts())
    assert "language model" in captions and "English → German" not in captions
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, "language-model.png")


@pytest.mark.parametrize(
    "path, title, name",
    [
        ("positional", "Positional encoding", "positional.png"),
        ("tokenization", "Tokenization", "tokenization.png"),
        ("lecture", "Worked examples", "lecture.png"),
        ("attention?tab=Model+grid", "Attention", "attention-grid.png"),
        ("attention?tab=Head+statistics&kind=cross", "Attention", "attention-stats.png"),
    ],
)
def test_every_page_renders_in_the_browser(server, new_page, path, title, name):
    page = new_page(DESKTOP)
    page.goto(f"{server}/{path}")
    page.get_by_role("heading", name=title).first.wait_for()
    settle(page)
    expect(page.locator('[data-testid="stPlotlyChart"], [data-testid="stVegaLiteChart"]').first).to_be_visible()
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, name)


def test_training_page_launches_and_watches_a_language_model_run(fresh_server, new_page):
    """As a student would: pick the language-model preset (Brown corpus), cut it to 12 steps, start it, and watch
    the live charts until the run has finished; then the run is in the table and its heads-forming slider works."""
    url, runs, visits = fresh_server
    visits.append("training")
    page = new_page(DESKTOP)
    page.goto(f"{url}/training")
    page.get_by_role("heading", name="Training").first.wait_for()
    settle(page)
    page.get_by_text("No runs yet").wait_for()
    page.get_by_test_id("stSelectbox").filter(has_text="Preset").click()
    page.get_by_role("option", name="2-minute CPU demo, language model").click()
    settle(page)
    expect(page.get_by_role("radio", name="Brown corpus (English)")).to_be_checked()
    steps = page.get_by_label("max steps")
    expect(steps).to_have_count(1, timeout=RUN_TIMEOUT_MS)  # the form redrawn for the preset replaces the old one
    steps.fill("12")  # snapshots at steps 0, 10 and 12: enough for "Heads forming", quick on a busy machine
    steps.press("Tab")
    page.get_by_role("button", name="Start training").click()
    page.get_by_text("Started run").wait_for()
    expect(page.get_by_text("--corpus brown").first).to_be_visible()
    page.get_by_text(re.compile(r"state \S*finished")).wait_for(timeout=240_000)  # the fragment polls every 2 s
    settle(page)
    assert_no_traceback(page)
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    assert (run / "best" / "model.safetensors").is_file()
    expect(page.get_by_text("Validation perplexity").first).to_be_visible()
    expect(page.get_by_text("Heads forming").first).to_be_visible()
    page.wait_for_timeout(500)
    shot(page, "training-finished.png")


# --- the Training page follows a live run ---------------------------------------------------------------
#: A tiny translator that trains until stopped (2-minute limit per leg), snapshots at steps 0, 10, 30, 100, 300, …
FORM = {**TF.preset_form("2-minute CPU demo"), **LONG}


@pytest.fixture
def stopped_run(fresh_server, monkeypatch):
    """A real run in the fresh app's runs folder, stopped after its step-10 snapshot: ``(base URL, run folder)``;
    stopped again at the end."""
    url, root, visits = fresh_server
    visits.append("training live")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(L.DEMO_ENV, raising=False)
    run = L.launch(FORM, root, name="demo")
    try:
        assert wait_for(lambda: any(s.step >= 10 for s in R.read_probes(run)), 180), R.log_tail(run)
        assert L.stop(run)
        assert wait_for(lambda: L.run_state(run) == "stopped", 120), R.log_tail(run)
        yield url, run
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


def test_the_page_follows_a_resumed_run(stopped_run, new_page):
    """A run stopped from outside, resumed from the page: the page shows the new leg as starting or running at once
    (not the stopped status.json of the leg before), enables Stop without a reload, keeps the runs table's step and
    the heads-forming snapshot moving with the trainer, and says this leg's minutes beside the run's total. What
    AppTest cannot show: it reruns the whole script where the served page only reruns its polling fragments. Runs
    after the language model's test, whose finished run is older in the table than this one."""
    url, run = stopped_run
    first_leg = R.read_status(run)
    page = new_page(PROJECTOR)
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
    expect(page.get_by_text(re.compile(r"this leg [\d.]+ of 2 minutes · total [\d.]+ minutes")).first).to_be_visible(
        timeout=15_000
    )

    # The runs table and heads forming keep up with the trainer (they were drawn once with the page).
    step = table_step(page)
    assert wait_for(lambda: table_step(page) > max(step, first_leg["step"]), 60), (step, table_step(page))
    assert wait_for(lambda: snapshot_step(page) > shown, 90), (shown, R.read_probes(run)[-1].step)
    page.wait_for_timeout(500)
    shot(page, "training-live.png")

    stop.click()
    expect(page.get_by_text(re.compile(r"demo — state stopped"))).to_be_visible(timeout=120_000)
    assert_no_traceback(page)
    status = R.read_status(run)
    assert status["leg"] == 2 and status["started"] == first_leg["started"]
