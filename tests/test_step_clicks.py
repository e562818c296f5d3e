"""Quick clicks on the step buttons of Translate and the Decoding lab (every click counts), with Streamlit's AppTest.

In a browser, a click's script run starts while the run for the previous click may still be executing (Streamlit's
fast reruns), and a click can arrive before the previous run has drawn the buttons again. Two things broke:

- the pages stepped one ``Stepper`` kept in ``st.session_state`` from both runs at once, leaving it half-updated
  (``RuntimeError: Expected tensor for argument #1 'indices' … got torch.FloatTensor``);
- each button carried the step it leads to (``args=(step + 1,)``), so two clicks handled with the callbacks of one
  drawing both went to the same step (six clicks ended at step 2).

The browser test ``tests/test_lecture_browser.py::test_a_burst_of_next_clicks_counts_every_click_and_never_crashes``
clicks for real; these tests pin both causes down without timing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from decoding.stepping import Stepper

ROOT = Path(__file__).resolve().parent.parent
CKPT = ROOT / "checkpoints" / "en-de"
pytestmark = pytest.mark.skipif(not (CKPT / "model.safetensors").is_file(), reason="checkpoints/en-de is missing")

#: Runs one page; first replays ``st.session_state["_replay"] = (callback, args, n)``: n clicks handled with the
#: callback one drawing of the buttons registered, as Streamlit does when clicks outrun the redraw.
WRAPPER = """
import pathlib, runpy
import streamlit as st
st.session_state["app_ckpt_path"] = pathlib.Path({ckpt!r})
replay = st.session_state.get("_replay")
if replay:
    del st.session_state["_replay"]
    callback, args, n = replay
    for _ in range(n):
        callback(*args)
runpy.run_path({page!r}, run_name="__main__")
"""
PAGES = {"translate": ("tr_step", "Next"), "decoding": ("dl_step", "Next")}


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


def open_page(page: str, **query: str) -> AppTest:
    at = AppTest.from_string(
        WRAPPER.format(ckpt=str(CKPT), page=str(ROOT / "app_pages" / page / f"{page}.py")), default_timeout=90
    )
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def registered_callback(at: AppTest, label: str):
    """``(callback, args)`` the last drawing registered for the button ``label``."""
    (button,) = [b for b in at.button if b.label == label]
    state = object.__getattribute__(at.session_state, "_state")
    state = getattr(state, "_state", state)
    meta = state._new_widget_state.widget_metadata[button.id]
    return meta.callback, meta.callback_args or ()


@pytest.mark.parametrize("page", list(PAGES))
def test_clicks_handled_before_the_buttons_are_redrawn_each_count(page):
    key, label = PAGES[page]
    at = open_page(page, text="The cat sat on the mat.")
    assert at.session_state[key] == 0
    callback, args = registered_callback(at, "Next")
    at.session_state["_replay"] = (callback, args, 3)  # three clicks on the Next drawn at step 0
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state[key] == 3 and at.query_params["step"] == "3"
    callback, args = registered_callback(at, "Back")
    at.session_state["_replay"] = (callback, args, 2)
    at.run()
    assert at.session_state[key] == 1


@pytest.mark.parametrize("page", list(PAGES))
def test_the_session_keeps_the_step_number_not_a_decoding_that_runs_could_share(page):
    """Overlapping runs of one session must not step a shared object: the session holds no Stepper (the pages
    keep a step number and read a frozen, shared Decoding)."""
    key, _ = PAGES[page]
    at = open_page(page, text="The cat sat on the mat.", step="2")
    assert at.session_state[key] == 2

    def holds_a_decoding(value) -> bool:
        if isinstance(value, Stepper):
            return True
        return isinstance(value, (tuple, list)) and any(holds_a_decoding(v) for v in value)

    kept = {
        k: type(at.session_state[k]).__name__ for k in at.session_state.keys() if holds_a_decoding(at.session_state[k])
    }
    assert not kept, kept
