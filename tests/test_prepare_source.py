"""The preparation of user input (``decoding.stepping.prepare_source``): an empty text refused, whitespace,
control and invisible format characters taken out, a huge text refused and a long one truncated, unknown characters
noted; on the tiny BPE tokenizer."""

from __future__ import annotations

import pytest

from decoding.stepping import MAX_INPUT_CHARS, InputError, prepare_source


def _prep(tokenizer, text, max_len=64):
    return prepare_source(tokenizer, text, max_len, eos_id=2, unk_id=3)


@pytest.mark.parametrize("text", ["", "   ", "\n\t  \n", "\x00\x01\x7f", None])
def test_prepare_source_empty_raises(tokenizer, text):
    with pytest.raises(InputError, match="empty"):
        _prep(tokenizer, text)


def test_prepare_source_plain(tokenizer):
    src = _prep(tokenizer, "  The house   is big. ")
    assert src.text == "The house is big."
    enc = tokenizer.encode("The house is big.")
    assert src.ids == enc.ids + [2]
    assert src.tokens == enc.tokens + ["<eos>"]
    assert src.offsets == enc.offsets + [(len(src.text), len(src.text))]
    assert not src.truncated and src.notes == []


def test_prepare_source_removes_control_characters(tokenizer):
    src = _prep(tokenizer, "The house\x00 is\x07big.\x1b")
    assert src.text == "The house is big."
    assert all(ord(c) >= 32 for c in src.text)
    assert any("Control characters were removed" in n for n in src.notes)
    # Newlines and tabs are whitespace, not a reason for a note.
    plain = _prep(tokenizer, "The house\nis\tbig.")
    assert plain.text == "The house is big." and plain.notes == []


def test_prepare_source_removes_invisible_format_characters(tokenizer):
    """A zero-width space and a right-to-left override survived the cleaning: invisible, or showing a text other
    than the one the model reads."""
    src = _prep(tokenizer, "The ho\u200buse \u202eis big.\ufeff")
    assert src.text == "The house is big."
    assert any("Invisible formatting characters" in n for n in src.notes)
    joined = _prep(tokenizer, "The house\u200d is big.")  # a joiner shapes scripts and emoji: it stays
    assert "\u200d" in joined.text and not any("Invisible" in n for n in joined.notes)


def test_prepare_source_refuses_huge_text(tokenizer):
    with pytest.raises(InputError, match=r"10,000 characters.*2,000 characters"):
        _prep(tokenizer, "a" * 10_000)
    with pytest.raises(InputError):
        _prep(tokenizer, "b" * (MAX_INPUT_CHARS + 1))
    assert _prep(tokenizer, "house " * (MAX_INPUT_CHARS // 6)).truncated  # at the limit: accepted, cut


def test_prepare_source_truncates_long_text(tokenizer):
    text = " ".join(["The house is big."] * 60)
    assert 500 < len(text) < MAX_INPUT_CHARS
    src = _prep(tokenizer, text, max_len=64)
    assert src.truncated
    assert len(src.ids) == len(src.tokens) == len(src.offsets) == 64
    assert src.ids[-1] == 2 and src.tokens[-1] == "<eos>"
    assert src.ids[:-1] == tokenizer.encode(text).ids[:63]
    assert any("cut" in n and "64 tokens" in n for n in src.notes)
    # One token less than the limit is not truncated.
    short = _prep(tokenizer, "The house is big.", max_len=len(tokenizer.encode("The house is big.").ids) + 1)
    assert not short.truncated


def test_prepare_source_notes_unknown_characters(tokenizer):
    src = _prep(tokenizer, "The house 😀 is big.")
    assert 3 in src.ids
    assert any("<unk>" in n and "😀" in n for n in src.notes)
