"""The everyday-English dev set ``assets/eval/everyday.tsv``: well-formed, complete, and never trained on."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpora.files import dataset_path, read_tsv, split_key

EVERYDAY = Path(__file__).resolve().parent.parent / "assets" / "eval" / "everyday.tsv"

#: The six everyday sentences the set must hold, with their reference translations.
REQUIRED = {
    "The cat sat on the mat.": "Die Katze saß auf der Matte.",
    "I am hungry.": "Ich habe Hunger.",
    "Bobby likes blackberries.": "Bobby mag Brombeeren.",
    "The weather is nice today.": "Das Wetter ist heute schön.",
    "My brother lives in Berlin.": "Mein Bruder wohnt in Berlin.",
    "Thank you very much.": "Vielen Dank.",
}


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return EVERYDAY.read_text(encoding="utf-8").splitlines()


def test_every_line_is_one_clean_pair(lines):
    assert len(lines) >= 120
    for number, line in enumerate(lines, 1):
        assert line.count("\t") == 1, f"line {number}: expected exactly one TAB: {line!r}"
        for side in line.split("\t"):
            assert side, f"line {number}: empty side: {line!r}"
            assert side == side.strip(), f"line {number}: leading/trailing space: {line!r}"
    assert EVERYDAY.read_bytes().endswith(b"\n")


def test_read_tsv_reads_every_line(lines):
    assert len(read_tsv(EVERYDAY)) == len(lines)


def test_no_duplicate_english_side(lines):
    keys = [" ".join(line.split("\t")[0].lower().split()) for line in lines]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    assert not duplicates


def test_holds_the_required_sentences(lines):
    pairs = dict(line.split("\t") for line in lines)
    for english, german in REQUIRED.items():
        assert pairs.get(english) == german, english


def test_shares_no_english_side_with_the_training_files(lines):
    # split_key (the key of the project's own leak checks) ignores case, spacing and punctuation:
    # stricter than an exact match.
    ours = {split_key(line.split("\t")[0]): line.split("\t")[0] for line in lines}
    trained = set()
    for name in ("train", "phrases", "words"):
        trained.update(split_key(pair.src) for pair in read_tsv(dataset_path(name)))
    overlap = sorted(english for key, english in ours.items() if key in trained)
    assert not overlap, f"trained on: {overlap}"
