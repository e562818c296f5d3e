"""The real EN–DE sentence pairs: Tatoeba, Multi30K and BConTrasT, and the general-domain files of
:mod:`corpora.extra`, read as they are distributed, split, cleaned of every evaluation sentence (their mixture
into one training file: :mod:`corpora.mixture`).

Nothing here is shipped: the sources live in ``../shared/data/`` (or wherever a user downloaded them, see
``docs/training.md``) and everything prepared from them goes to ``data/prepared/`` (git-ignored). Each prepared
corpus is a set of ``source<TAB>target`` files, ``{corpus}.{split}.tsv.gz``.

Leak rule: an English sentence that occurs in *any* evaluation set (see :func:`evaluation_keys`) never occurs in any
training file, compared by :func:`corpora.files.split_key` (lower-case, letters and digits only). One English
sentence with several German translations is one unit: Tatoeba is split by the hash of its English side, so all of
a sentence's translations land in the same split, and its held-out sets keep every translation as a reference.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from corpora.extra import EXTRA_CORPORA, FLORES_NAME, GENERAL_DOMAIN, extra_train_dir, read_extra_corpus, read_flores
from corpora.files import (
    ASSETS_DATA,
    DataError,
    Pair,
    dataset_path,
    read_text_lines,
    read_tsv,
    split_key,
    split_of,
    write_tsv_gz,
)

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
PREPARED = ROOT / "data" / "prepared"
EVERYDAY = ROOT / "assets" / "eval" / "everyday.tsv"
#: Sentences a lecturer types in a Transformer lecture (its words, idioms, professions): shipped, never trained on.
LECTURE = ROOT / "assets" / "eval" / "lecture.tsv"

#: Where each corpus is found in ``../shared/data`` when no ``--source`` is given.
DEFAULT_SOURCES = {
    "tatoeba": SHARED_DATA / "tatoeba-deu-eng" / "deu-eng.zip",
    "multi30k": SHARED_DATA / "multi30k",
    "bcontrast": SHARED_DATA / "bcontrast",
}
PARALLEL = tuple(DEFAULT_SOURCES)
#: Synthetic pairs: real German with English made by a German → English model (python -m tools.backtranslate).
BACKTRANSLATED = "backtranslated"

# Tatoeba has no official split: hash buckets 0-9 (1 %) are held out for validation, 10-19 (1 %) for test.
TATOEBA_VALID, TATOEBA_TEST = range(0, 10), range(10, 20)
MULTI30K_SPLITS = {
    "train": "train",
    "valid": "val",
    "test2016": "test_2016_flickr",
    "test2017": "test_2017_flickr",
    "mscoco2017": "test_2017_mscoco",
    "test2018": "test_2018_flickr",
}
BCONTRAST_SPLITS = {"train": "train", "valid": "dev", "test": "test"}
#: The evaluation-only sets of ``../shared/data/eval``: ``{name: (english file, german file)}``.
EVAL_ONLY = {
    "newstest2014": ("newstest2014.en.gz", "newstest2014.de.gz"),
    "newstest2013": ("newstest2013.en.gz", "newstest2013.de.gz"),
    "tatoeba-challenge": ("tatoeba-test-v2021-08-07.eng.gz", "tatoeba-test-v2021-08-07.deu.gz"),
}


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare_corpus` wrote: ``{split: number of pairs}``, the training pairs removed as leaks, and
    (a general-domain file) the pairs its cleaning ``dropped``, ``{reason: pairs}``."""

    counts: dict[str, int]
    removed: int
    dropped: dict[str, int] = field(default_factory=dict)


def prepared_path(corpus: str, split: str, out: Path = PREPARED) -> Path:
    """``out/{corpus}.{split}.tsv.gz``."""
    return Path(out) / f"{corpus}.{split}.tsv.gz"


def _pairs_from_lines(lines, where: str) -> list[Pair]:
    """``English<TAB>German[<TAB>attribution…]`` lines as pairs; blank lines skipped.

    Raises:
        DataError: a non-blank line has no tab, or no usable pair at all.
    """
    pairs = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            raise DataError(f"{where}, line {n}: expected 'English<TAB>German', got {line[:60]!r}")
        if parts[0].strip() and parts[1].strip():
            pairs.append(Pair(parts[0].strip(), parts[1].strip()))
    if not pairs:
        raise DataError(f"{where} holds no 'English<TAB>German' lines")
    return pairs


def read_tatoeba(source: str | Path) -> list[Pair]:
    """The pairs of a manythings.org/anki Tatoeba export: the ``deu-eng.zip`` (its ``deu.txt``) or the text file
    itself, with or without the third (attribution) column.

    Raises:
        DataError: missing file, a zip without ``deu.txt``, or lines that are not tab-separated pairs.
    """
    source = Path(source)
    if source.is_dir():
        candidates = [source / "deu-eng.zip", source / "deu.txt"]
        source = next((c for c in candidates if c.is_file()), candidates[0])
    if not source.is_file():
        raise DataError(f"No Tatoeba export at {source} (expected deu-eng.zip or deu.txt from manythings.org/anki)")
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as z:
            names = [n for n in z.namelist() if n.endswith(".txt") and not Path(n).name.startswith("_")]
            if not names:
                raise DataError(f"{source} holds no deu.txt")
            try:
                text = io.TextIOWrapper(z.open(names[0]), encoding="utf-8").read()
            except (OSError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
                raise DataError(f"Cannot read {names[0]} in {source}: {exc}") from exc
        return _pairs_from_lines(text.splitlines(), f"{source}:{names[0]}")
    return _pairs_from_lines(read_text_lines(source), str(source))


def _line_file(folder: Path, stem: str) -> Path:
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.is_file():
            return candidate
    raise DataError(f"No {stem}(.gz) in {folder}")


def read_aligned(en_path: Path, de_path: Path) -> list[Pair]:
    """Two line-aligned files (plain or ``.gz``) as pairs.

    Raises:
        DataError: a file is missing or unreadable, or the two differ in their number of lines.
    """
    en, de = list(read_text_lines(en_path)), list(read_text_lines(de_path))
    if len(en) != len(de):
        raise DataError(f"{en_path} has {len(en)} lines but {de_path} has {len(de)}: they must be line-aligned")
    pairs = [Pair(e.strip(), d.strip()) for e, d in zip(en, de, strict=True) if e.strip() and d.strip()]
    if not pairs:
        raise DataError(f"{en_path} and {de_path} hold no sentence pairs")
    return pairs


def read_multi30k(folder: str | Path, split: str) -> list[Pair]:
    """One split of Multi30K task 1 from its raw folder (``train.en.gz`` + ``train.de.gz``, …; plain files too).
    ``split`` is a key of :data:`MULTI30K_SPLITS`. Raises ``DataError`` for a missing folder or file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"No Multi30K folder at {folder} (expected data/task1/raw of the multi30k/dataset repository)")
    stem = MULTI30K_SPLITS[split]
    return read_aligned(_line_file(folder, f"{stem}.en"), _line_file(folder, f"{stem}.de"))


def read_bcontrast(source: str | Path, split: str = "train") -> list[Pair]:
    """One split of BConTrasT as ``English<TAB>German`` lines: ``source`` is the folder of ``{train,dev,test}.en-de
    .tsv(.gz)``, or (for ``split="train"``) a single TSV file. Raises ``DataError`` for a missing or malformed file."""
    source = Path(source)
    if source.is_file():
        if split != "train":
            raise DataError(f"{source} is one file; give the folder holding train, dev and test")
        return _pairs_from_lines(read_text_lines(source), str(source))
    if not source.is_dir():
        raise DataError(f"No BConTrasT data at {source} (expected a folder of train/dev/test .en-de.tsv.gz files)")
    path = _line_file(source, f"{BCONTRAST_SPLITS[split]}.en-de.tsv")
    return _pairs_from_lines(read_text_lines(path), str(path))


def split_tatoeba(pairs: list[Pair]) -> dict[str, list[Pair]]:
    """``{"train", "valid", "test"}``: Tatoeba split by the hash of each pair's English side, so every translation of
    one English sentence lands in the same split (:data:`TATOEBA_VALID`, :data:`TATOEBA_TEST`)."""
    splits: dict[str, list[Pair]] = {"train": [], "valid": [], "test": []}
    for p in pairs:
        splits[split_of(p.src, TATOEBA_VALID, TATOEBA_TEST)].append(p)
    return splits


def read_corpus(corpus: str, source: str | Path | None = None, shared: Path = SHARED_DATA) -> dict[str, list[Pair]]:
    """Every split of ``corpus`` (``tatoeba``, ``multi30k``, ``bcontrast`` or one of
    :data:`~corpora.extra.EXTRA_CORPORA`) read from ``source`` (default: its place in ``shared``). Raises
    ``DataError`` for bad or missing files, ``ValueError`` for an unknown corpus."""
    return _read_corpus(corpus, source, shared)[0]


def _read_corpus(corpus: str, source, shared: Path) -> tuple[dict[str, list[Pair]], dict[str, int]]:
    """:func:`read_corpus` and what cleaning dropped (``{reason: pairs}``; only the general-domain files clean)."""
    if corpus in EXTRA_CORPORA:
        return read_extra_corpus(corpus, source if source is not None else extra_train_dir(shared))
    if corpus not in DEFAULT_SOURCES:
        raise ValueError(f"unknown corpus {corpus!r}; choose one of {', '.join(PARALLEL + EXTRA_CORPORA)}")
    source = Path(source) if source is not None else DEFAULT_SOURCES[corpus]
    if corpus == "tatoeba":
        return split_tatoeba(read_tatoeba(source)), {}
    if corpus == "multi30k":
        return {split: read_multi30k(source, split) for split in MULTI30K_SPLITS}, {}
    return {split: read_bcontrast(source, split) for split in BCONTRAST_SPLITS}, {}


def evaluation_sets(prepared: Path = PREPARED, shared: Path = SHARED_DATA) -> dict[str, list[Pair]]:
    """Every evaluation set that exists here: Ding valid/test, the everyday and lecture sets (shipped), each prepared
    corpus's held-out splits in ``prepared``, the evaluation-only sets of ``shared/eval`` (newstest, the
    Tatoeba-Challenge test) and FLORES-200 devtest (``shared/extra/eval``). ``{name: pairs}``; sets whose files are
    absent are left out."""
    sets: dict[str, list[Pair]] = {}
    for split in ("valid", "test"):
        if dataset_path(split, ASSETS_DATA).is_file():
            sets[f"ding.{split}"] = read_tsv(dataset_path(split, ASSETS_DATA))
    for name, path in (("everyday", EVERYDAY), ("lecture", LECTURE)):
        if path.is_file():
            sets[name] = read_tsv(path)
    for path in sorted(Path(prepared).glob("*.tsv.gz")):
        corpus, split = path.name[: -len(".tsv.gz")].split(".", 1)
        if split != "train" and corpus != "mixture":
            sets[f"{corpus}.{split}"] = read_tsv(path, allow_empty=True)
    for name, (en, de) in EVAL_ONLY.items():
        if (shared / "eval" / en).is_file() and (shared / "eval" / de).is_file():
            sets[name] = read_aligned(shared / "eval" / en, shared / "eval" / de)
    if (flores := read_flores(shared)) is not None:
        sets[FLORES_NAME] = flores
    return sets


def evaluation_keys(sets: dict[str, list[Pair]]) -> set[str]:
    """The normalised English sentences (:func:`~corpora.files.split_key`) of every pair in ``sets``."""
    return {split_key(p.src) for pairs in sets.values() for p in pairs}


def remove_leaks(pairs: list[Pair], keys: set[str]) -> list[Pair]:
    """``pairs`` less every pair whose normalised English side is in ``keys`` (order kept)."""
    return [p for p in pairs if split_key(p.src) not in keys]


def prepare_corpora(
    sources: dict[str, str | Path | None], out: Path = PREPARED, shared: Path = SHARED_DATA
) -> dict[str, Prepared]:
    """Read each corpus of ``sources`` (``{corpus: source or None for its default place}``), write every held-out
    split first, then each training split cleaned of every evaluation sentence known now: the held-out splits of
    all of them (so preparing several at once leaves no cross-corpus leak) and :func:`evaluation_sets`.
    Returns ``{corpus: Prepared}``. Raises ``DataError`` (nothing is written then)."""
    read, dropped = {}, {}
    for corpus, source in sources.items():
        read[corpus], dropped[corpus] = _read_corpus(corpus, source, shared)
    for corpus, splits in read.items():
        for split, pairs in splits.items():
            if split != "train":
                write_tsv_gz(prepared_path(corpus, split, out), pairs)
    general = [read[c]["valid"] for c in GENERAL_DOMAIN if c in read]
    if general:  # the news and Wikipedia held-out pairs together: a general-domain valid set to select by
        write_tsv_gz(prepared_path("general", "valid", out), interleave(general))
    keys = evaluation_keys(evaluation_sets(out, shared))
    done = {}
    for corpus, splits in read.items():
        train = remove_leaks(splits["train"], keys)
        write_tsv_gz(prepared_path(corpus, "train", out), train)
        done[corpus] = Prepared(
            {s: len(train) if s == "train" else len(p) for s, p in splits.items()},
            len(splits["train"]) - len(train),
            dropped[corpus],
        )
    return done


def prepare_corpus(
    corpus: str, source: str | Path | None = None, out: Path = PREPARED, shared: Path = SHARED_DATA
) -> Prepared:
    """:func:`prepare_corpora` for one corpus: its splits in ``out`` (:func:`prepared_path`), the training split
    cleaned of every evaluation sentence known now, its own held-out splits included. Raises ``DataError``."""
    return prepare_corpora({corpus: source}, out, shared)[corpus]


def interleave(groups: list[list[Pair]]) -> list[Pair]:
    """Round-robin over ``groups`` (the first pairs of the result come from every group: the trainer translates
    the first ``--eval-sentences`` valid pairs)."""
    out: list[Pair] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out
