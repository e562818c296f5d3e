"""The Decoding lab's force panel in a lecture: a choice left from an earlier step never ends in a traceback, and a
long typed piece is not echoed in full.

Streamlit keeps a select box's value as its *label* and looks the label up among the options of the next run; a
label no longer among them comes back as the raw string. The candidates' labels carry their probabilities, so
after Next every label of the previous step was stale, and "Force this token" parsed ``'▁lern (p = 0.039)'`` as a
token id. ``AppTest`` only ever sends a label among the box's current options, so these tests send the stale label
themselves, as the browser did.
"""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from tests.test_decoding_page import CKPT, _at_repo_root, button, clean, page  # noqa: F401 (a fixture)

SENTENCE = "Machine learning is changing the world."
pytestmark = pytest.mark.skipif(not (CKPT / "model.safetensors").is_file(), reason="checkpoints/en-de is missing")


def force_box(at):
    (box,) = [s for s in at.selectbox if s.label.startswith("Candidate")]
    return box


@pytest.fixture
def browser_sends(monkeypatch):
    """``browser_sends(box, label)``: the next run gets ``label`` as ``box``'s choice, as a browser that still shows
    it sends it (AppTest itself only sends labels among the box's current options)."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    from streamlit.testing.v1.element_tree import Selectbox

    original = Selectbox._widget_state
    stale: dict[str, str] = {}

    def state(self):
        if self.id not in stale:
            return original.fget(self)
        ws = WidgetState()
        ws.id, ws.string_value = self.id, stale[self.id]
        return ws

    monkeypatch.setattr(Selectbox, "_widget_state", property(state))
    return lambda box, label: stale.__setitem__(box.id, label)


def step_to(at, step: int):
    while at.session_state["dl_step"] < step:
        button(at, "Next").click().run()
        clean(at)
    assert at.session_state["dl_step"] == step
    return at


def test_the_candidate_list_follows_the_step_and_preselects_its_runner_up():
    at = step_to(page(text=SENTENCE), 2)
    before = force_box(at)
    now = force_box(step_to(at, 3))
    assert now.key != before.key and "dl_force_choice" in now.key
    assert now.index == 1  # this step's runner-up, not a leftover of step 2
    button(at, "Force this token").click().run()
    clean(at)
    assert at.session_state["dl_forced"] == {3: now.value}


def test_a_label_left_from_the_step_before_forces_the_token_it_names_never_a_traceback(browser_sends):
    """Next, Next, Next, then "Force this token" with the box still showing step 2's label."""
    from app_pages.decoding import lab
    from model.checkpoint import load_checkpoint

    at = step_to(page(text=SENTENCE), 2)
    stale = force_box(at).options[force_box(at).index]  # e.g. "▁lern  (p = 0.039)": step 2's runner-up
    browser_sends(force_box(step_to(at, 3)), stale)
    button(at, "Force this token").click().run()
    clean(at)
    tok = load_checkpoint(CKPT).tokenizer
    assert at.session_state["dl_forced"] == {3: lab.resolve_piece(tok, stale.split(lab.LABEL_SEP)[0])}


def test_a_choice_that_names_no_token_forces_nothing_and_says_so(browser_sends):
    at = step_to(page(text=SENTENCE), 1)
    browser_sends(force_box(at), "qqqzzzxx  (p = 0.039)")
    button(at, "Force this token").click().run()
    clean(at)
    assert at.session_state["dl_forced"] == {}
    assert any("could not be read" in w.value for w in at.warning)


def test_a_long_unknown_piece_is_echoed_cut_short():
    at = step_to(page(text=SENTENCE), 1)
    at.text_input(key="dl_force_text").input("q" * 5000).run()
    button(at, "Force this token").click().run()
    clean(at)
    (warning,) = [w.value for w in at.warning if "not a piece" in w.value]
    assert "q" * 40 + "…" in warning and "q" * 41 not in warning and len(warning) < 400


def test_a_choice_is_read_without_ever_raising(tokenizer):
    from app_pages.decoding import lab

    some = tokenizer.id_to_token(5)
    assert lab.chosen_token(tokenizer, 5) == 5
    assert lab.chosen_token(tokenizer, lab.candidate_label(some, 0.039, 3)) == 5
    for value in (None, True, -1, tokenizer.vocab_size, 2.5, "qqqzzzxx  (p = 0.1)", "", "  (p = ", object()):
        assert lab.chosen_token(tokenizer, value) is None
    assert lab.echo("x" * 41) == "x" * 40 + "…" and lab.echo("short") == "short"
