"""The shared ground of every corpus: parallel ``source<TAB>target`` files, plain text lines, and the hash split.

Every corpus splits by a stable hash of its normalised text (:func:`split_of`), so a sentence's split never
changes when the corpus grows, and no valid/test sentence can leak into training by a re-shuffle.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ASSETS_DATA = Path(__file__).resolve().parent.parent / "assets" / "data"


@dataclass(frozen=True)
class Pair:
    """One parallel example: ``src`` (English) and ``tgt`` (German)."""

    src: str
    tgt: str


class DataError(ValueError):
    """A parallel-text file that cannot be used (missing, empty, or without ``source<TAB>target`` lines)."""


def read_text_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (plain or ``.gz``), newline removed, read lazily.

    Raises:
        DataError: the file does not exist, or cannot be read or decoded (a truncated ``.gz``, say).
    """
    path = Path(path)
    if not path.is_file():
        hint = ""
        if path.parent.name == "prepared":  # the real corpora are never shipped: they are prepared on each machine
            hint = " (the real sentence pairs are prepared on each machine: python -m corpora prepare all)"
        raise DataError(f"No such data file: {path}{hint}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                yield line.rstrip("\n")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"Cannot read {path}: {exc}") from exc


def read_tsv(path: str | Path, limit: int | None = None, allow_empty: bool = False) -> list[Pair]:
    """Read a ``source<TAB>target`` file (plain or ``.gz``), skipping blank and malformed lines.

    Raises:
        DataError: the file does not exist, cannot be read, or holds no usable pair (unless ``allow_empty``: a
            prepared held-out split of a small corpus may be empty).
    """
    pairs: list[Pair] = []
    for line in read_text_lines(path):
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0].strip() and parts[1].strip():
            pairs.append(Pair(parts[0].strip(), parts[1].strip()))
            if limit is not None and len(pairs) >= limit:
                break
    if not pairs and not allow_empty:
        raise DataError(f"{path} holds no 'source<TAB>target' lines")
    return pairs


def write_tsv_gz(path: Path, pairs: list[Pair]) -> None:
    """Write ``source<TAB>target`` lines, gzip-compressed with a fixed mtime (reproducible bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for p in pairs:
            gz.write(f"{p.src}\t{p.tgt}\n".encode("utf-8"))
    tmp.replace(path)


def dataset_path(name: str, data_dir: Path = ASSETS_DATA) -> Path:
    """Path of a shipped split: ``train``, ``valid``, ``test``, ``phrases`` or ``words``."""
    return data_dir / f"{name}.tsv.gz"


def split_key(english: str) -> str:
    """The normalised English side used for the split and for leak checks (lower-case, letters and digits only)."""
    return " ".join(re.findall(r"\w+", english.lower()))


def bucket_of(text: str) -> int:
    """A stable bucket 0–999 of ``text``: the MD5 hash of :func:`split_key`, modulo 1000 (the basis of every split)."""
    return int(hashlib.md5(split_key(text).encode("utf-8")).hexdigest(), 16) % 1000


def split_of(english: str, valid: range, test: range) -> str:
    """``"train"``, ``"valid"`` or ``"test"``: which of the bucket ranges :func:`bucket_of` the English side falls in
    (deterministic)."""
    bucket = bucket_of(english)
    if bucket in valid:
        return "valid"
    if bucket in test:
        return "test"
    return "train"
