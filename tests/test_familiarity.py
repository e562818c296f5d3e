"""Far from what the model has seen: the share of words cut into pieces (reading.familiarity), the suite's measure of
it, the Translate page's warning, and the lecture presets the shipped models get right."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from decoding.batched import translate_texts
from evaluation.suite import far_scores, markdown, piece_stats
from model.checkpoint import load_checkpoint
from reading.familiarity import FAR_MIN_SPLIT, familiarity, word_pieces
from ui.state import HARD_PRESETS, LM_PRESETS, PRESETS, preset_label

#: Far from the shipped translator's training text: five of its seven words are cut into pieces.
FAR = "Mitochondrial enzymes catalyse the oxidation of pyruvate."
#: News was: the shipped vocabulary was learned with news in it, so this sentence has one word cut ("Thursday").
NEWS = "The European Central Bank raised interest rates again on Thursday."

#: The shipped translator's greedy output for every preset it gets right (checked by a German reader).
RIGHT = {
    "My brother lives in Berlin.": "Mein Bruder lebt in Berlin.",
    "A dog runs through the snow.": "Ein Hund rennt durch den Schnee.",
    "Thank you very much.": "Vielen Dank.",
    "The weather is nice today.": "Das Wetter ist heute schön.",
    "The cat sat on the mat.": "Die Katze saß auf der Matte.",
    "The woman gave the man a book.": "Die Frau gab dem Mann ein Buch.",
    "The girl who is wearing a red dress is my sister.": "Das Mädchen, das ein rotes Kleid trägt, ist meine Schwester.",
    "Alice went to the market and bought apples.": "Alice ging auf den Markt und kaufte Äpfel.",
    "He played the piano.": "Er spielte Klavier.",
    "I would like a cup of coffee.": "Ich hätte gerne eine Tasse Kaffee.",
    # the self-attention classic: "it" is the animal ("es", neuter like "das Tier"), and the negation stays
    "The animal didn't cross the street because it was too tired.": (
        "Das Tier überquerte die Straße nicht, weil es zu müde war."
    ),
}


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(ROOT / "checkpoints" / "en-de")


def test_word_pieces_counts_the_pieces_over_each_word(tokenizer):
    counted = word_pieces(tokenizer, "the cat didn't")
    assert [w for w, _ in counted] == ["the", "cat", "didn", "t"]  # letters and digits; the apostrophe splits
    assert all(n >= 1 for _, n in counted)
    assert word_pieces(tokenizer, "") == word_pieces(tokenizer, " ,.! ") == []


def test_a_far_sentence_is_far_and_the_message_names_its_cut_words(shipped):
    found = familiarity(shipped.tokenizer, FAR)
    assert found.far and found.split_count >= FAR_MIN_SPLIT and found.split_share >= 0.3
    assert "Mitochondrial" in found.split and found.words == 7
    message = found.message()
    assert message.startswith("Far from what this model has seen")
    assert f"{found.split_count} of its 7 words" in message and "“Mitochondrial”" in message
    assert message.endswith("Expect a poor translation.")
    assert found.message("continuation").endswith("Expect a poor continuation.")
    assert not familiarity(shipped.tokenizer, NEWS).far  # its vocabulary was learned with news in it


def test_the_cut_words_named_add_up_to_the_count_given(shipped):
    """A word cut more than once was named once: "3 of its 4 words" above a list of two."""
    found = familiarity(shipped.tokenizer, "Blorf blorf blorf now.")
    assert found.split_count == 3 and found.words == 4 and found.split == ("Blorf", "blorf")
    message = found.message()
    assert "3 of its 4 words" in message and "(“Blorf”, “blorf” twice)" in message
    assert sum(found.times) == found.split_count


def test_few_or_no_words_are_never_far(shipped):
    tok = shipped.tokenizer
    for text in ("", "   ", "🦜🦜🦜", "Bobby likes blackberries.", "Xylophonists", "a\x00b\u202e"):
        found = familiarity(tok, text)
        assert not found.far and found.message() is None, text
    assert familiarity(tok, "").words == 0 and familiarity(tok, "").split_share == 0.0


def test_a_word_opening_a_sentence_counts_only_if_its_lower_case_is_cut(shipped):
    tok = shipped.tokenizer
    assert len(tok.encode("Weather").ids) > 1 and len(tok.encode("weather").ids) == 1  # what the rule is about
    assert "Weather" not in familiarity(tok, "Weather changes fast.").split
    assert "Weather" not in familiarity(tok, "I wait. Weather changes.").split
    assert "Weather" in familiarity(tok, "I said Weather again.").split  # inside a sentence a capital is a rare form


def test_every_lecture_preset_is_familiar_and_hard_ones_are_labelled(shipped):
    for text in PRESETS:
        assert not familiarity(shipped.tokenizer, text).far, text
    lm = load_checkpoint(ROOT / "checkpoints" / "brown-lm")
    for text in LM_PRESETS:
        assert not familiarity(lm.tokenizer, text).far, text
    assert set(HARD_PRESETS) < set(PRESETS) and PRESETS[-len(HARD_PRESETS) :] == list(HARD_PRESETS)
    assert preset_label("Bobby likes blackberries.") == "Bobby likes blackberries.  ·  hard: a rare word"
    assert preset_label(PRESETS[0]) == PRESETS[0]


def test_the_shipped_translator_gets_every_preset_right_but_the_hard_ones(shipped):
    assert set(RIGHT) | set(HARD_PRESETS) == set(PRESETS)
    outputs = dict(zip(PRESETS, translate_texts(shipped.model, shipped.tokenizer, PRESETS), strict=True))
    assert {s: outputs[s] for s in RIGHT} == RIGHT
    # a hard preset that comes out right should join the others, and lose its label
    assert outputs["Bobby likes blackberries."] != "Bobby mag Brombeeren."
    assert outputs["Time flies like an arrow."] != "Die Zeit fliegt wie ein Pfeil."


def test_piece_stats_counts_the_far_sentences(shipped):
    stats = piece_stats(shipped.tokenizer, [FAR, "Thank you very much."])
    assert stats["far_rate"] == 0.5


def test_far_scores_split_the_chrf_by_the_warning(shipped):
    sources = [FAR, "Thank you very much."]
    refs = [["Mitochondriale Enzyme katalysieren die Oxidation von Pyruvat."], ["Vielen Dank."]]
    scores = far_scores(shipped.tokenizer, sources, ["Die Enzyme.", "Vielen Dank."], refs)
    assert scores["far"] == 1 and scores["rest_chrf"] == 100.0 and scores["far_chrf"] < 30
    none = far_scores(shipped.tokenizer, sources[1:], ["Vielen Dank."], refs[1:])
    assert none == {"far": 0, "far_chrf": None, "rest_chrf": 100.0}


def test_the_suite_report_has_a_row_of_far_and_other_chrf_per_set():
    row = {
        "name": "flores200-devtest",
        "sentences": 2,
        "references": 2,
        "scores": {"greedy": {"bleu": 1, "chrf": 2}},
        "repeats": {},
        "far": {"greedy": {"far": 1, "far_chrf": 20.5, "rest_chrf": 40.25}},
    }
    report = {"sets": [row], "goal": {"The cat sat on the mat.": {"greedy": "x"}}}
    text = markdown(report, [])
    assert "| flores200-devtest | 1 of 2 | 20.50 | 40.25 |" in text


def test_the_translate_page_warns_about_a_far_sentence_and_not_about_a_preset(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception and not any("Far from what" in w.value for w in at.warning)
    at.text_input(key="tr_text").set_value(FAR).run()
    assert not at.exception
    assert any(w.value.startswith("Far from what this model has seen") for w in at.warning)
    assert at.selectbox(key="tr_text_preset").options[-1] == "Bobby likes blackberries.  ·  hard: a rare word"
