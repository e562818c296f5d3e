"""App-level tests of the Streamlit pages with ``streamlit.testing.v1.AppTest`` (no browser, no server): the shell,
the Translate page, query parameters; beside them ``test_app_input.py``, ``test_app_attention.py`` and
``test_app_checkpoints.py``.

They drive the real app (``app.py`` → ``app_pages/translate/translate.py`` / ``app_pages/attention/attention.py``) with
the checkpoint in ``checkpoints/en-de``. That model is a placeholder today and will be replaced by the trained one, so
nothing here asserts particular German words: only structure (elements, charts, counts), state (``step``, ``text``,
query parameters) and that problems surface as readable messages, never as an exception.

Extra (corrupt) checkpoints are offered to the app through ``$ATTENTION_EXPLORER_CHECKPOINTS``.
"""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import (
    ATTENTION_PAGE,
    CFG,
    ROOT,
    alignment_z,
    assert_clean,
    button,
    chip_markdown,
    make_app,
    n_alignments,
    n_charts,
    step_line,
)

from ui.state import PRESETS

pytestmark = pytest.mark.usefixtures("app_at_repo_root")


# --- app shell ----------------------------------------------------------------------------------------
def test_no_legacy_pages_folder():
    """A ``pages/`` folder next to ``app.py`` switches Streamlit to its legacy multipage mode for every run
    until ``st.navigation`` has been called once in the process: a first visit by deep link (``/attention``)
    then runs the page without ``app.py`` (no sidebar, no model). The pages live in ``app_pages/``."""
    assert not (ROOT / "pages").exists(), "rename pages/ (see the docstring)"
    assert (ROOT / "app_pages" / "translate" / "translate.py").is_file()
    assert (ROOT / "app_pages" / "attention" / "attention.py").is_file()


def test_sidebar_is_drawn_on_every_run():
    at = make_app()
    for _ in range(2):
        assert at.sidebar.title[0].value == "Attention Explorer"
        assert at.sidebar.selectbox(key="app_ckpt").value == "en-de"
        assert any("d_model" in c.value for c in at.sidebar.caption)  # the model card line
        button(at, "Next").click().run()
    at.switch_page(ATTENTION_PAGE).run()
    assert at.sidebar.selectbox(key="app_ckpt").value == "en-de"
    at.run()
    assert at.sidebar.selectbox(key="app_ckpt").value == "en-de"


def test_the_served_app_watches_no_files_and_make_dev_polls_only_its_own():
    """A served app watches no files: the polling watcher's rescheduled tasks kept a stopped server alive for
    16-19 s after SIGTERM. ``make dev`` polls for saved edits (Streamlit's inotify watcher watched the app's folder
    recursively, .venv and runs/ included: during training its event queue overflowed and it stopped), and never
    watches modules under .venv or runs/."""
    import tomllib

    server = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]
    assert server["fileWatcherType"] == "none"
    assert {".venv", "runs"} <= set(server["folderWatchBlacklist"])
    dev = next(
        line for line in (ROOT / "Makefile").read_text().splitlines() if "streamlit run" in line and "runOnSave" in line
    )
    assert "--server.fileWatcherType poll" in dev


# --- Translate page -------------------------------------------------------------------------------------
def test_translate_page_renders_default_preset():
    at = make_app()
    assert_clean(at)
    assert at.session_state["app_text"] == PRESETS[0] == "My brother lives in Berlin."
    assert at.text_input(key="tr_text").value == PRESETS[0]
    assert at.selectbox(key="tr_text_preset").value == PRESETS[0]
    assert [b.label for b in at.button] == ["Reset", "Back", "Next", "Run to end"]
    assert at.session_state["tr_step"] == 0
    step, total = step_line(at)
    assert step == 0 and 1 <= total <= CFG.max_len - 1
    # The translation box and the two chip rows are there; no chart before the first step.
    assert any("border-left:6px solid" in md.value for md in at.markdown)
    assert n_charts(at) == n_alignments(at) == 0
    assert any("Next" in i.value for i in at.info)
    assert button(at, "Reset").proto.disabled and button(at, "Back").proto.disabled
    assert not button(at, "Next").proto.disabled
    assert at.sidebar.selectbox(key="app_ckpt").value == "en-de"


def test_step_buttons_move_through_the_decoding():
    at = make_app()
    button(at, "Next").click().run()
    assert_clean(at)
    assert at.session_state["tr_step"] == 1
    assert step_line(at)[0] == 1
    assert at.query_params["step"] == "1"
    # The buttons are drawn for the new step in the same run (Back is usable right away).
    assert not button(at, "Back").proto.disabled and not button(at, "Reset").proto.disabled
    # The next-token list and the alignment map, both HTML (no Plotly to load or redraw per click).
    topk = [md.value for md in at.markdown if 'class="ae-topk"' in md.value]
    assert len(topk) == 1
    assert any("the 10 most probable next tokens" in md.value and "**Step 1 of" in md.value for md in at.markdown)
    assert topk[0].count('class="ae-topk-row"') == min(10, CFG.vocab_size)
    assert n_alignments(at) == 1 and n_charts(at) == 0  # the Translate page draws no Plotly chart
    z = alignment_z(at)
    assert z.shape[0] == 1  # one row per generated token, one column per source piece
    assert np.allclose(z.sum(axis=1), 1.0, atol=5e-5 * z.shape[1])  # data-w has 4 decimals: ±5e-5 per cell

    button(at, "Back").click().run()
    assert_clean(at)
    assert at.session_state["tr_step"] == 0 and n_charts(at) == n_alignments(at) == 0

    button(at, "Run to end").click().run()
    assert_clean(at)
    step, total = step_line(at)
    assert at.session_state["tr_step"] == step == total >= 1
    assert button(at, "Next").proto.disabled and button(at, "Run to end").proto.disabled
    assert alignment_z(at).shape[0] == total
    last = chip_markdown(at)

    button(at, "Back").click().run()
    assert at.session_state["tr_step"] == total - 1
    if total > 1:
        assert chip_markdown(at) != last
    button(at, "Next").click().run()
    assert_clean(at)
    assert at.session_state["tr_step"] == total
    assert chip_markdown(at) == last  # Back then Next shows exactly the same step

    button(at, "Reset").click().run()
    assert_clean(at)
    assert at.session_state["tr_step"] == 0 and step_line(at) == (0, total)
    assert n_charts(at) == n_alignments(at) == 0


def test_translate_layer_and_head_selectors():
    at = make_app(step="1")
    assert n_alignments(at) == 1
    at.selectbox(key="tr_layer").select(0).run()
    at.selectbox(key="tr_head").select(CFG.n_heads - 1).run()
    assert_clean(at)
    assert n_alignments(at) == 1
    at.selectbox(key="tr_head").select("mean").run()
    assert_clean(at)
    assert n_alignments(at) == 1


def test_preset_changes_text_and_resets_step():
    at = make_app()
    button(at, "Next").click().run()
    button(at, "Next").click().run()
    assert at.session_state["tr_step"] == 2
    other = PRESETS[1]  # not the default, so the link must carry it
    at.selectbox(key="tr_text_preset").select(other).run()
    assert_clean(at)
    assert at.text_input(key="tr_text").value == other
    assert at.session_state["app_text"] == other
    assert at.query_params["text"] == other
    assert at.session_state["tr_step"] == 0 and step_line(at)[0] == 0
    assert "step" not in at.query_params  # the URL agrees with the page (a reload shows step 0)


def test_new_text_resets_step_in_state_and_url():
    at = make_app()
    button(at, "Next").click().run()
    button(at, "Next").click().run()
    at.text_input(key="tr_text").set_value("Time flies like an arrow.").run()
    assert_clean(at)
    assert at.session_state["tr_step"] == 0
    assert "step" not in at.query_params
    # A reload of that URL shows the same view.
    again = make_app(**dict(at.query_params))
    assert_clean(again)
    assert again.session_state["app_text"] == "Time flies like an arrow."
    assert again.session_state["tr_step"] == 0


# --- query parameters ----------------------------------------------------------------------------------
def test_query_params_open_a_given_sentence_and_step():
    at = make_app(text="The cat sat on the mat.", step="2")
    assert_clean(at)
    assert at.session_state["app_text"] == "The cat sat on the mat."
    assert at.text_input(key="tr_text").value == "The cat sat on the mat."
    assert at.selectbox(key="tr_text_preset").value == "The cat sat on the mat."
    assert at.session_state["tr_step"] == 2 and step_line(at)[0] == 2
    assert n_alignments(at) == 1
    assert alignment_z(at).shape[0] == 2

    # Same view as reaching step 2 with the buttons.
    by_hand = make_app()
    by_hand.selectbox(key="tr_text_preset").select("The cat sat on the mat.").run()
    button(by_hand, "Next").click().run()
    button(by_hand, "Next").click().run()
    assert chip_markdown(by_hand) == chip_markdown(at)


def test_query_param_text_that_is_not_a_preset():
    at = make_app(text="你好世界", step="1")
    assert_clean(at)
    assert at.text_input(key="tr_text").value == "你好世界"
    assert at.selectbox(key="tr_text_preset").value == "— your own sentence —"
    assert any("<unk>" in i.value for i in at.info)


@pytest.mark.parametrize(
    "query",
    [
        {"step": "abc"},
        {"step": "-5"},
        {"step": "1.5"},
        {"step": "99999"},
        {"ckpt": "does-not-exist"},
        {"ckpt": ""},
        {"kind": "nonsense"},
        {"text": ""},
        {"text": "x" * 10_000},
        {"text": "Hello\x00 world", "step": "3", "kind": "encoder", "ckpt": "en-de"},
    ],
    ids=[
        "step-abc",
        "step-neg",
        "step-float",
        "step-huge",
        "ckpt-unknown",
        "ckpt-empty",
        "kind-nonsense",
        "text-empty",
        "text-huge",
        "all-at-once",
    ],
)
def test_garbage_query_params_never_raise(query):
    at = make_app(**query)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    if "ckpt" in query and query["ckpt"] != "en-de":
        assert any("Ignored `ckpt` (checkpoint)" in w.value for w in at.sidebar.warning)
        assert at.sidebar.selectbox(key="app_ckpt").value == "en-de"
    if query.get("step") in ("abc", "-5", "1.5"):
        assert at.session_state["tr_step"] == 0
    if query.get("step") == "99999":
        step, total = step_line(at)
        assert at.session_state["tr_step"] == step == total
        assert at.query_params["step"] == str(total)
    at.switch_page(ATTENTION_PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    if query.get("kind") == "nonsense":
        assert at.radio(key="at_kind").value == "cross"  # falls back to the last kind
