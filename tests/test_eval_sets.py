"""The shipped evaluation sets ``assets/eval/everyday.tsv`` and ``assets/eval/lecture.tsv``: well-formed, complete,
and never trained on."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpora.files import dataset_path, read_tsv, split_key

EVAL = Path(__file__).resolve().parent.parent / "assets" / "eval"
#: Each shipped set with the fewest pairs it must hold.
SETS = {"everyday.tsv": 120, "lecture.tsv": 50}

#: The six everyday sentences the everyday set must hold, with their reference translations.
REQUIRED = {
    "The cat sat on the mat.": "Die Katze saß auf der Matte.",
    "I am hungry.": "Ich habe Hunger.",
    "Bobby likes blackberries.": "Bobby mag Brombeeren.",
    "The weather is nice today.": "Das Wetter ist heute schön.",
    "My brother lives in Berlin.": "Mein Bruder wohnt in Berlin.",
    "Thank you very much.": "Vielen Dank.",
}


@pytest.fixture(scope="module", params=sorted(SETS))
def named_lines(request) -> tuple[str, list[str]]:
    return request.param, (EVAL / request.param).read_text(encoding="utf-8").splitlines()


def test_every_line_is_one_clean_pair(named_lines):
    name, lines = named_lines
    assert len(lines) >= SETS[name]
    for number, line in enumerate(lines, 1):
        assert line.count("\t") == 1, f"{name} line {number}: expected exactly one TAB: {line!r}"
        for side in line.split("\t"):
            assert side, f"{name} line {number}: empty side: {line!r}"
            assert side == side.strip(), f"{name} line {number}: leading/trailing space: {line!r}"
    assert (EVAL / name).read_bytes().endswith(b"\n")
    assert len(read_tsv(EVAL / name)) == len(lines)


def test_no_duplicate_english_side(named_lines):
    _, lines = named_lines
    keys = [" ".join(line.split("\t")[0].lower().split()) for line in lines]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    assert not duplicates


def test_the_everyday_set_holds_the_required_sentences():
    pairs = dict(line.split("\t") for line in (EVAL / "everyday.tsv").read_text(encoding="utf-8").splitlines())
    for english, german in REQUIRED.items():
        assert pairs.get(english) == german, english


def test_the_sets_share_no_english_side():
    everyday, lecture = ({split_key(p.src) for p in read_tsv(EVAL / name)} for name in sorted(SETS))
    assert not everyday & lecture


def test_shares_no_english_side_with_the_training_files(named_lines):
    # split_key (the key of the project's own leak checks) ignores case, spacing and punctuation:
    # stricter than an exact match.
    _, lines = named_lines
    ours = {split_key(line.split("\t")[0]): line.split("\t")[0] for line in lines}
    trained = set()
    for name in ("train", "phrases", "words"):
        trained.update(split_key(pair.src) for pair in read_tsv(dataset_path(name)))
    overlap = sorted(english for key, english in ours.items() if key in trained)
    assert not overlap, f"trained on: {overlap}"


def test_the_leak_check_removes_both_shipped_sets_from_training_data(tmp_path):
    from corpora.parallel import evaluation_sets

    assert {"everyday", "lecture"} <= evaluation_sets(tmp_path, tmp_path).keys()
