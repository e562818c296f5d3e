"""A checkpoint folder as the picker shows it: its label, and the version that makes a loaded copy stale.

No Streamlit: :mod:`ui.state` loads and caches the checkpoints, keyed by :func:`folder_version`, and lists them with
:func:`checkpoint_label`.
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

from model.checkpoint import Checkpoint, checkpoint_arch
from model.hf.card import folder_facts

#: Files whose change makes a loaded checkpoint stale: ours, and a Hugging Face folder's (weights, tokenizers).
VERSION_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "source.spm",
    "target.spm",
)


#: Seconds a folder's version is reused before its files are read again. A click reads it for every shared value it
#: asks for (the decoding, each step's attribution and faithfulness, the checkpoint itself), nine stat calls each:
#: py-spy found 3-4 % of a served process's samples there while visitors stepped with the attribution view. A folder
#: retrained in place is still noticed, a second later.
VERSION_TTL_S = 1.0
_versions: dict[str, tuple[float, float]] = {}  # folder → (monotonic time read, version)


def folder_version(path: Path) -> float:
    """The newest modification time of the folder's :data:`VERSION_FILES` that exist (a Marian folder has no
    ``tokenizer.json``); 0.0 when none does. Read at most once per :data:`VERSION_TTL_S` per folder."""
    now, key = time.monotonic(), str(path)
    seen = _versions.get(key)
    if seen is not None and now - seen[0] < VERSION_TTL_S:
        return seen[1]
    version = _read_version(path)
    if len(_versions) > 256:  # folders come and go (runs, uploads): keep the table small
        _versions.clear()
    _versions[key] = (now, version)
    return version


def folder_arch(path: str | Path) -> str:
    """:func:`~model.checkpoint.checkpoint_arch` of a folder, read once per :func:`folder_version`: pages ask it on
    every run (the default sentence, the checkpoints to compare with), and it reads and parses ``config.json``."""
    return _arch(str(path), folder_version(Path(path)))


@lru_cache(maxsize=256)
def _arch(folder: str, version: float) -> str:
    return checkpoint_arch(Path(folder))


def _read_version(path: Path) -> float:
    times = []
    for name in VERSION_FILES:
        try:
            times.append((path / name).stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


def checkpoint_folder(ckpt: Checkpoint) -> Path:
    """The folder ``ckpt`` was loaded from (every checkpoint the pages show has one). Raises ``ValueError`` for a
    checkpoint built in memory, which has none."""
    if ckpt.path is None:
        raise ValueError("this checkpoint was built in memory: it has no folder")
    return Path(ckpt.path)


def size_text(n_bytes: int) -> str:
    """``297_900_000`` → ``"298 MB"``, ``31_400`` → ``"31 kB"`` (decimal units, as download sites write them)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n_bytes} B"


def checkpoint_label(name: str, folder: Path) -> str:
    """The picker's label: a checkpoint of ours by its name; a Hugging Face folder with its weights' size and where
    it came from (``"opus-mt-en-de · 298 MB · Hugging Face"``, plus its Hub name when the folder is named
    otherwise: ``"mt · 298 MB · Hugging Face Helsinki-NLP/opus-mt-en-de"``)."""
    facts = folder_facts(folder)
    if facts is None:
        return name
    same = facts["source"].rsplit("/", 1)[-1] == name
    source = "Hugging Face" + ("" if same else f" {facts['source']}")
    return f"{name} · {size_text(facts['file_bytes'])} · {source}"
