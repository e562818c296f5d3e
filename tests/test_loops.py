"""decoding.loops: a word or short phrase written three times or more in a row is found and named, twice is not (it is
often the language), and the Translate page says why greedy decoding loops when it does."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from decoding.batched import greedy_batch
from decoding.loops import LOOP_TIMES, find_loop, longest_repeat, loop_completions, words

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "text,phrase,times",
    [
        ("his own own own own own own own own", "own", 8),
        ("Bobby likes to be able to be able to be able to be able to be", "to be able", 4),
        ("aber für die die die die vorhergesetzte", "die", 4),
        ("Sport Sport Sport und andere", "Sport", 3),
        ("„Nein“, „nein“, nein!", None, None),  # case kept: a capital is another word
        ("Frauen, die die Kinder sehen, und die die Stadt", None, None),  # twice is right German
        ("Pago Pago liegt auf Samoa.", None, None),
        ("", None, None),
        ("a b a b", None, None),  # a phrase twice
        ("a b a b a b c c c c c", "a b", 3),  # the loop over more words wins: 6 words of "a b" against 5 of "c"
        ("a b a b a b c c c c c c c", "c", 7),
    ],
)
def test_a_loop_is_a_phrase_three_times_or_more_in_a_row(text, phrase, times):
    loop = find_loop(text)
    if phrase is None:
        assert loop is None
    else:
        assert loop is not None and (loop.text, loop.times) == (phrase, times)
        assert words(text)[loop.start : loop.start + len(loop.phrase)] == list(loop.phrase)


def test_the_longer_loop_in_words_is_the_one_named():
    loop = find_loop("x y x y x y x y z z z")
    assert (loop.text, loop.times) == ("x y", 4)  # 8 words of loop against 3
    assert LOOP_TIMES == 3 and find_loop("z z z z", times=5) is None


def test_words_and_the_longest_run_strip_punctuation_and_german_quotes():
    assert words("„Ja“, sagte er. (ja!)") == ["Ja", "sagte", "er", "ja"]
    assert longest_repeat("Das Tier, das das Futter frisst.") == 2 and longest_repeat("") == 0


def test_the_message_says_what_loops_and_what_to_try():
    loop = find_loop("to be able to be able to be able")
    lm = loop.message("continuation")
    assert "“to be able” 3 times in a row" in lm and "Sampling" in lm and "Holtzman" in lm
    assert "far from its training text" in loop.message("translation")


def _run_to_end(at) -> None:
    """Click Translate's *Run to end* (the page shows what is generated so far)."""
    next(b for b in at.button if b.label == "Run to end").click().run()


def test_the_translate_page_explains_a_loop_and_stays_quiet_without_one(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.run()  # the shipped translator on its first preset: no loop
    _run_to_end(at)
    assert not at.exception and not any("goes round in a loop" in i.value for i in at.info)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "brown-lm"
    at.run()
    at.text_input(key="tr_text").set_value("Bobby likes").run()  # the shipped LM: "to be able to be able …"
    _run_to_end(at)  # the note comes with the loop, once it is written, not before the first step
    assert not at.exception
    loops = [i.value for i in at.info if "goes round in a loop" in i.value]
    assert loops and "The continuation goes round in a loop" in loops[0] and "Sampling" in loops[0]
    assert not any("With the loop guard" in m.value for m in at.markdown)  # the guard's decoding needs an encoder


def test_the_translate_page_shows_the_translation_the_loop_guard_gives(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.run()
    # A FLORES sentence on which the shipped translator loops: "… in einer Umgebung, die nicht nur nur nur nur …"
    # (how many times depends on the weights; a loop is three or more)
    at.text_input(key="tr_text").set_value(
        "No child should ever have to grow up in an environment that is not nurturing, caring, and educational, "
        "but they do."
    ).run()
    _run_to_end(at)
    assert not at.exception
    loops = [i.value for i in at.info if "goes round in a loop" in i.value]
    assert loops and re.search(r"“nur” (\d+) times in a row", loops[0])
    assert int(re.search(r"“nur” (\d+) times", loops[0]).group(1)) >= 3
    guarded = [m.value for m in at.markdown if m.value.startswith("**With the loop guard**")]
    assert len(guarded) == 1 and find_loop(guarded[0].split("):", 1)[1]) is None
    assert "nur nur nur" not in guarded[0]


def _ends_in_loop(ids: list[int], times: int, max_tokens: int) -> bool:
    """The definition, written out: some phrase of 1..max_tokens tokens ends ``ids`` ``times`` times in a row."""
    return any(len(ids) >= times * n and ids[-times * n :] == ids[-n:] * times for n in range(1, max_tokens + 1))


@pytest.mark.parametrize("times", [2, 3])
def test_the_guard_bans_exactly_the_tokens_that_would_close_a_loop(times):
    rng = random.Random(times)
    for _ in range(3000):
        ids = [rng.randrange(3) for _ in range(rng.randrange(12))]
        banned = loop_completions(ids, times, max_tokens=4)
        assert banned == {t for t in range(4) if _ends_in_loop(ids + [t], times, 4)}, ids


def test_the_guard_lets_a_phrase_come_twice_at_three_and_never_at_two():
    die, stadt, comma = 7, 8, 9
    assert loop_completions([comma, die, die], 3) == {die}  # ", die die" is German; a third "die" is a loop
    assert loop_completions([comma, die], 3) == set() and loop_completions([comma, die], 2) == {die}
    assert loop_completions([die, stadt, die], 2) == {stadt, die}  # "die Stadt die Stadt", "die die"
    assert loop_completions([], 2) == set()
    with pytest.raises(ValueError, match="at least twice"):
        loop_completions([die], 1)


def test_greedy_decoding_with_the_guard_never_loops(make_model, encode_src):
    # An untrained model is the surest looper there is: the same few tokens over and over.
    model = make_model(seed=3).eval()
    srcs = [encode_src(s) for s in ("the dog runs", "a cat", "the cat sees the dog")]
    free = greedy_batch(model, srcs, max_new_tokens=30)
    assert any(_ends_in_loop(out[:k], 3, 8) for out in free for k in range(len(out) + 1))  # the test can fail
    for times in (2, 3):
        for out in greedy_batch(model, srcs, max_new_tokens=30, loop_times=times):
            assert not any(_ends_in_loop(out[:k], times, 8) for k in range(len(out) + 1)), out
