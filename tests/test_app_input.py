"""App-level AppTest tests of what a visitor types: unusable, odd and long text with their notes, the sentence box
and its presets, the model switch, the hosted demo's switch. Nothing asserts particular German words."""

from __future__ import annotations

import re

import pytest
from app_helpers import (
    APP,
    ATTENTION_PAGE,
    CARD,
    CFG,
    DEFAULT_CKPT,
    PAGES,
    ROOT,
    TIMEOUT,
    alignment_z,
    assert_clean,
    button,
    make_app,
    n_alignments,
    n_charts,
    step_line,
)
from streamlit.testing.v1 import AppTest

from decoding.stepping import MAX_INPUT_CHARS, input_limit, prepare_source
from model.checkpoint import load_checkpoint
from model.config import ModelConfig
from ui.model_card import opening_layer
from ui.state import LM_PRESETS, PRESETS

pytestmark = pytest.mark.usefixtures("app_at_repo_root")


# --- bad input -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "empty"),
        ("   \n\t  ", "empty"),
        ("x" * 10_000, f"{MAX_INPUT_CHARS:,} characters"),
    ],
    ids=["empty", "whitespace", "10000-chars"],
)
def test_unusable_text_gives_a_warning(text, expected):
    at = make_app()
    at.text_input(key="tr_text").set_value(text).run()
    assert_clean(at)
    assert len(at.warning) == 1 and expected in at.warning[0].value
    assert n_charts(at) == n_alignments(at) == 0 and len(at.button) == 0  # the page stops after the message
    # …and recovers as soon as the text is usable again.
    at.text_input(key="tr_text").set_value("The cat sat on the mat.").run()
    assert_clean(at)
    assert not at.warning and len(at.button) == 4


@pytest.mark.parametrize(
    "text, note, unreadable",
    [
        ("I love 🍕 and 🎉", "<unk>", False),
        ("Hello\x00\x07 world", "Control characters", False),
        ("שלום עולם", "<unk>", True),  # Cyrillic no longer: the 16k vocabulary, learned with news, has most of it
        ("你好世界", "<unk>", True),
    ],
    ids=["emoji", "control-chars", "hebrew", "chinese"],
)
def test_odd_text_translates_with_a_note(text, note, unreadable):
    """Odd text is still stepped through, with a note on what the model cannot read; text made mostly of such
    characters also gets a warning that the output is made up."""
    at = make_app()
    at.text_input(key="tr_text").set_value(text).run()
    assert_clean(at)
    assert [("cannot read most" in w.value) for w in at.warning] == ([True] if unreadable else [])
    assert any(note in i.value for i in at.info), [i.value for i in at.info]
    assert len(at.button) == 4
    button(at, "Next").click().run()
    assert_clean(at)
    assert at.session_state["tr_step"] == 1 and n_alignments(at) == 1
    assert any(note in i.value for i in at.info)


def _long_text() -> str:
    """A text of more than ``max_len`` tokens but fewer than ``MAX_INPUT_CHARS`` characters."""
    tok = load_checkpoint(DEFAULT_CKPT).tokenizer
    sentence = "The cat sat on the mat. "
    text = sentence
    while len(tok.encode(text).ids) + 1 <= CFG.max_len:
        text += sentence
    if len(text) >= MAX_INPUT_CHARS:  # pragma: no cover - a model with a very long max_len
        pytest.skip("max_len too long for a < 2,000-character truncation test")
    return text.strip()


def test_long_text_is_truncated_with_a_note():
    text = _long_text()
    at = make_app()
    at.text_input(key="tr_text").set_value(text).run()
    assert_clean(at)
    assert not at.warning
    assert any(f"limit of {CFG.max_len} tokens" in i.value for i in at.info), [i.value for i in at.info]
    button(at, "Next").click().run()
    assert_clean(at)
    assert n_alignments(at) == 1
    assert alignment_z(at).shape[1] == CFG.max_len  # max_len - 1 pieces + <eos>


def test_the_truncation_note_says_which_words_were_never_read():
    """A 126-word paragraph was cut to 127 pieces with a note, but nothing said the rest of it was never translated:
    the note names how many words were left out and where they start."""
    cfg, tok = CFG, load_checkpoint(DEFAULT_CKPT).tokenizer
    words = [f"word{i}" for i in range(126)]
    src = prepare_source(tok, " ".join(words), input_limit(cfg), cfg.eos_id, cfg.unk_id)
    assert src.truncated
    (note,) = [n for n in src.notes if "limit of" in n]
    left = int(re.search(r"its last (\d+) words", note).group(1))
    kept = tok.decode(src.ids[:-1]).split()  # a word cut inside is half kept, and counted as left out
    assert 0 < left < len(words) and len(kept) + left in (len(words), len(words) + 1)
    assert f"from “{words[len(words) - left]} " in note and "left out" in note


# --- the sentence box, the presets and the model switch ---------------------------------------------------------------
def banner(at: AppTest) -> str:
    return next(md.value for md in at.markdown if "border-left:6px solid" in md.value)


def test_typing_an_own_sentence_turns_the_presets_box_neutral():
    at = make_app()
    at.selectbox(key="tr_text_preset").select("The cat sat on the mat.").run()
    assert at.text_input(key="tr_text").value == "The cat sat on the mat."
    at.text_input(key="tr_text").input("I like my bike.").run()
    assert_clean(at)
    assert at.selectbox(key="tr_text_preset").value == "— your own sentence —"
    assert at.session_state["app_text"] == "I like my bike." and at.query_params["text"] == "I like my bike."
    at.selectbox(key="tr_text_preset").select("Time flies like an arrow.").run()  # a preset again fills the box
    assert at.text_input(key="tr_text").value == "Time flies like an arrow."
    assert at.selectbox(key="tr_text_preset").value == "Time flies like an arrow."


@pytest.mark.skipif(
    not (ROOT / "checkpoints" / "brown-lm" / "model.safetensors").is_file(), reason="checkpoints/brown-lm is missing"
)
def test_switching_models_gives_each_model_a_text_it_can_use():
    """A translator's preset handed to the language model gave '(empty output)' at 'Step 1 of 1': a preset of the
    other kind of model is replaced by the new model's default; a sentence the user typed is kept."""
    at = make_app(text="The cat sat on the mat.", step="3")
    at.sidebar.selectbox(key="app_ckpt").select("brown-lm").run()
    assert_clean(at)
    assert at.session_state["app_text"] == LM_PRESETS[0] == at.text_input(key="tr_text").value
    assert at.selectbox(key="tr_text_preset").value == LM_PRESETS[0]
    assert "text" not in at.query_params  # the new model's default sentence: left out of the link
    step, total = step_line(at)
    assert step == 0 and total > 1 and "(empty output)" not in banner(at)

    at.sidebar.selectbox(key="app_ckpt").select("en-de").run()
    assert_clean(at)
    assert at.text_input(key="tr_text").value == PRESETS[0] and "(empty output)" not in banner(at)

    at.text_input(key="tr_text").input("I like my bike.").run()
    at.sidebar.selectbox(key="app_ckpt").select("brown-lm").run()
    assert_clean(at)
    assert at.text_input(key="tr_text").value == "I like my bike."
    assert at.selectbox(key="tr_text_preset").value == "— your own prompt —"


def test_a_card_may_name_the_layer_the_pages_open_on():
    """``open_layer`` counts from 1 and must name a layer the kind has; anything else opens on the last layer."""
    for value, expected in ((3, 2), (1, 0), (6, 5), (7, 5), (0, 5), (-1, 5), ("3", 5), (True, 5), (2.0, 5), (None, 5)):
        assert opening_layer({"open_layer": value}, 6) == expected, value
    assert opening_layer({}, 4) == 3
    assert opening_layer({"open_layer": 5}, 4) == 3  # brown-lm has no layer 5


def test_the_translate_page_opens_on_the_cards_layer_and_keeps_it_out_of_the_link():
    """The shipped translator's card names the layer whose cross-attention lines the pieces up; a link without
    ?layer= opens there, the link stays short at that layer, and another layer goes into the link."""
    expected = opening_layer(CARD, CFG.n_decoder_layers)
    at = make_app(step="2")
    assert_clean(at)
    assert at.session_state["tr_layer"] == expected and "layer" not in at.query_params
    other = 0 if expected else 1
    at.selectbox(key="tr_layer").select(other).run()
    assert at.query_params["layer"] == str(other + 1)


@pytest.mark.parametrize("page, key", [("translate", "tr_layer"), ("attention", "at_layer")])
@pytest.mark.parametrize("picked", [None, 0], ids=["default-layer", "picked-layer"])
def test_switching_checkpoints_starts_the_new_model_at_its_default_layer_and_head(page, key, picked):
    """A layer index kept from en-de (its default, the last, or one the user picked) is not brown-lm's default and may
    not even exist there (en-de may have more layers); the switch forgets it, in the session and in the link."""
    lm_layers = ModelConfig.from_json(ROOT / "checkpoints" / "brown-lm" / "config.json").n_decoder_layers
    assert opening_layer(CARD, CFG.n_decoder_layers) != lm_layers - 1, (
        "the test needs two models that open on different layers"
    )
    at = make_app(step="1")
    if page == "attention":
        at.switch_page(ATTENTION_PAGE).run()
    assert at.session_state[key] == opening_layer(CARD, CFG.n_decoder_layers)  # en-de's
    if picked is not None:
        at.selectbox(key=key).select(picked).run()
        head_key = "tr_head" if page == "translate" else "at_head"
        at.selectbox(key=head_key).select(1).run()
        assert at.query_params["layer"] == "1" and at.query_params["head"] == "2"
    at.sidebar.selectbox(key="app_ckpt").select("brown-lm").run()
    assert_clean(at)
    if page == "translate":
        button(at, "Next").click().run()  # the layer box is drawn from step 1 on
    assert at.session_state[key] == lm_layers - 1  # brown-lm: its last layer
    assert at.query_params.get("layer") in (None, str(lm_layers)) and at.query_params.get("head") in (None, "all")
    if page == "translate":
        assert at.session_state["tr_head"] == "mean"
    else:
        assert at.session_state["at_head"] == "all" and at.session_state["at_kind"] == "self"


def test_a_long_text_stays_out_of_the_link_with_a_caption():
    long_text = "The cat sat on the mat. " * 30  # 720 characters: fine for the model, too long for a link
    at = make_app()
    at.text_input(key="tr_text").input(long_text).run()
    assert_clean(at)
    assert "text" not in at.query_params
    assert any("more than the 500 a link keeps" in c.value for c in at.caption)
    at.text_input(key="tr_text").input("Short again.").run()
    assert at.query_params["text"] == "Short again." and not any("a link keeps" in c.value for c in at.caption)


def test_the_translate_page_states_the_measured_quality_and_unreadable_text():
    """One plain line of measured quality under the title, and a warning for text made mostly of
    characters the vocabulary cannot read, instead of presenting a made-up output as a translation."""
    at = make_app(text="I am hungry.")
    assert_clean(at)
    card = load_checkpoint(DEFAULT_CKPT).card
    captions = " ".join(c.value for c in at.caption)
    assert f"BLEU {card['test']['bleu']:.1f}, chrF {card['test']['chrf']:.1f}" in captions
    assert "Expect mistakes" in captions
    assert not any("cannot read most" in w.value for w in at.warning)
    at = make_app(text="猫はマットの上に座った")
    assert not at.exception
    assert any("cannot read most of this text" in w.value for w in at.warning)


def test_one_switch_turns_on_the_hosted_demo_for_every_page(monkeypatch):
    """ATTENTION_EXPLORER_DEMO=1 (what ``make serve`` / ``deploy.serve --demo`` set): shorter inputs on every
    page, the sidebar says so, and training is off. It was read once at import, so a worker or test that set it
    later was not seen."""
    from ui.limits import DEMO_MAX_CHARS, limits

    assert not limits().demo
    monkeypatch.setenv("ATTENTION_EXPLORER_DEMO", "1")
    caps = limits()
    assert caps.demo and caps.max_chars == DEMO_MAX_CHARS and not caps.training
    text = "The cat sat on the mat. " * 20  # 480 characters: fine on a lecture-room server, too long in the demo
    for page, box in (("translate", "tr_text"), ("attention", "at_text"), ("decoding", "dl_text")):
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.switch_page(f"{PAGES}/{page}/{page}.py").run()
        at.text_input(key=box).input(text.strip()).run()
        assert not at.exception, (page, at.exception)
        assert any(f"up to {DEMO_MAX_CHARS}" in w.value for w in at.warning), (page, [w.value for w in at.warning])
        assert any("Hosted demo" in i.value for i in at.sidebar.info)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.switch_page(f"{PAGES}/training/training.py").run()
    assert any("training is switched off" in i.value for i in at.info)


def test_a_sentence_is_read_once_for_the_room_and_each_run_gets_its_own_copy(monkeypatch):
    """The source of a sentence and its warning are read once per checkpoint version and text and kept in the
    gate's cache: a page's second run (a Next click, another visitor, another page) tokenizes nothing, gets the same
    ids and the same warning in either form, and a change to its copy reaches no one else."""
    from ui import state

    ckpt = load_checkpoint(DEFAULT_CKPT)
    text = f"The quokka {id(monkeypatch)} photosynthesises."  # far from the training data, and new to this process
    calls = []
    real = state.prepare_source
    monkeypatch.setattr(state, "prepare_source", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    first, warning = state._read_source(ckpt, text, brief=True)
    second, again = state._read_source(ckpt, text, brief=True)
    assert calls == [text]
    assert again == warning == (state.familiarity(ckpt.tokenizer, text).message("translation", brief=True) or "")
    cfg = ckpt.config
    expected = real(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)
    assert first == second == expected and first is not second
    first.ids.append(0)
    assert state._read_source(ckpt, text, brief=True)[0] == expected
    assert calls == [text]
    _, long_form = state._read_source(ckpt, text, brief=False)  # the long form comes from the same reading
    assert long_form == (state.familiarity(ckpt.tokenizer, text).message("translation") or "")
    assert calls == [text]
