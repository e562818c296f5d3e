"""End-to-end tests in a real browser: the app served by ``streamlit run``, driven with Playwright + Chromium.

Screenshots go to ``test-artifacts/`` (git-ignored) for a human look:
``translate-step3.png`` and ``attention.png`` at 1600×1000, ``projector-run-to-end.png`` at 1280×720.
``training-finished.png``: a language-model run launched from the Training page and watched to its end (its
runs folder is temporary: ``ATTENTION_EXPLORER_RUNS``).
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
    serve_app,
    settle,
    shot,
    step_of,
    sync_api,
)

pytestmark = BROWSER_GROUP


@pytest.fixture(scope="module")
def first_visit_server():
    """An app no one has visited yet (the shared ``server`` has served other modules' tests). Yields the base URL."""
    yield from serve_app({}, "streamlit-first-visit-server.log")


@pytest.fixture(scope="module")
def training_server(tmp_path_factory):
    """The app with its runs folder in a temporary directory (``ATTENTION_EXPLORER_RUNS``): ``(url, runs_root)``."""
    runs = tmp_path_factory.mktemp("browser-runs")
    for url in serve_app({"ATTENTION_EXPLORER_RUNS": str(runs)}, "streamlit-training-server.log"):
        yield url, runs


# --- tests ----------------------------------------------------------------------------------
def test_deep_link_as_first_visit_shows_the_full_app(first_visit_server, new_page):
    """A fresh server whose first visitor opens /attention directly still runs app.py (sidebar, model)."""
    page = new_page()
    page.goto(f"{first_visit_server}/attention?text=The+cat+sat+on+the+mat.")
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
    looping = ("No+child+should+ever+have+to+grow+up+in+an+environment+that+is+not+nurturing,+caring,+and+"
               "educational,+but+they+do.")
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


def pick(page, label: str, option: str) -> None:
    """Choose ``option`` in the Streamlit selectbox labelled ``label`` as a person does: open it, click the item."""
    box = page.get_by_role("combobox", name=label, exact=True)
    expect(box).to_have_count(1, timeout=RUN_TIMEOUT_MS)  # a box redrawn for other options replaces the old one
    box.click()
    page.get_by_role("option", name=option, exact=True).click()
    settle(page)


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


@pytest.mark.parametrize("path, title, name", [
    ("positional", "Positional encoding", "positional.png"),
    ("tokenization", "Tokenization", "tokenization.png"),
    ("lecture", "Worked examples", "lecture.png"),
    ("attention?tab=Model+grid", "Attention", "attention-grid.png"),
    ("attention?tab=Head+statistics&kind=cross", "Attention", "attention-stats.png"),
])
def test_every_page_renders_in_the_browser(server, new_page, path, title, name):
    page = new_page(DESKTOP)
    page.goto(f"{server}/{path}")
    page.get_by_role("heading", name=title).first.wait_for()
    settle(page)
    expect(page.locator('[data-testid="stPlotlyChart"], [data-testid="stVegaLiteChart"]').first).to_be_visible()
    assert_no_traceback(page)
    page.wait_for_timeout(500)
    shot(page, name)


def test_training_page_launches_and_watches_a_language_model_run(training_server, new_page):
    """As a student would: pick the language-model preset (Brown corpus), cut it to 12 steps, start it, and watch
    the live charts until the run has finished; then the run is in the table and its heads-forming slider works."""
    url, runs = training_server
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
