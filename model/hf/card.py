"""The card of a Hugging Face model folder, synthesised from its own files: it has no ``card.json`` of ours.

What the pages can say truthfully: where the folder came from (``config.json``'s ``_name_or_path``, else the
folder's name), that its authors trained it (not this project), its size, its ``model_type`` and licence (from
``config.json`` or the ``license:`` line of the ``README.md`` front matter a Hub download has), and that this
project's Transformer code computes every number. No measured scores: nobody measured them here.
"""

from __future__ import annotations

import re
from pathlib import Path

from model.errors import CheckpointError
from model.hf.families import FAMILIES
from model.hf.loader import read_json, weights_path

COMPUTED_BY = (
    "Every number on the pages is computed by this project's own Transformer code (model/) with the "
    "folder's weights; the transformers library is not used."
)
_LICENSE_LINE = re.compile(r"^license:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)


def source_name(folder: str | Path, hf_cfg: dict) -> str:
    """Where the folder came from: ``_name_or_path`` (``"Helsinki-NLP/opus-mt-en-de"``; the ``/tmp/`` prefix the
    Marian converter saved some of them under is dropped), or the folder's name when the config has no such name
    or only a local path."""
    name = hf_cfg.get("_name_or_path")
    if isinstance(name, str):
        name = name.removeprefix("/tmp/").strip()
        if name and not name.startswith(("/", ".", "~")) and "\\" not in name:
            return name
    return Path(folder).name


def licence(folder: str | Path, hf_cfg: dict) -> str | None:
    """The licence the folder states: ``config.json``'s ``license`` key, else the ``license:`` line of
    ``README.md``'s front matter (between the leading ``---`` lines); ``None`` when neither says."""
    if isinstance(hf_cfg.get("license"), str) and hf_cfg["license"].strip():
        return hf_cfg["license"].strip()
    try:
        text = (Path(folder) / "README.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    front = text[3:].split("\n---", 1)[0]
    found = _LICENSE_LINE.search(front)
    return found.group(1) if found else None


def folder_facts(folder: str | Path) -> dict | None:
    """What the checkpoint picker shows without loading the weights: ``{"source", "file_bytes", "model_type"}``
    (``file_bytes``: the weights file's size in bytes), or ``None`` when ``folder`` is not a Hugging Face folder
    with a weights file."""
    folder = Path(folder)
    path = weights_path(folder)
    try:
        hf_cfg = read_json(folder / "config.json")
    except CheckpointError:
        return None
    if path is None or "model_type" not in hf_cfg:
        return None
    try:
        size = path.stat().st_size
    except OSError:
        return None
    return {"source": source_name(folder, hf_cfg), "file_bytes": size, "model_type": hf_cfg.get("model_type")}


def hf_card(folder: str | Path, info: dict) -> dict:
    """The card of a loaded Hugging Face folder (``info``: :func:`model.hf.loader.load_hf_model`'s).

    Keys: ``source``, ``architecture`` (the ``transformers`` class), ``model_type``, ``origin`` (one line:
    "Hugging Face MarianMTModel, trained by its authors …"), ``parameters`` (count), ``file_bytes`` (bytes of
    the weights file), ``weights_file``, ``license`` (when the folder states one), ``computed_by``.

    Raises:
        CheckpointError: ``config.json`` is unreadable (it was read a moment ago by the loader).
    """
    folder = Path(folder)
    hf_cfg = read_json(folder / "config.json")
    kind = info["model_type"]
    known = FAMILIES.get(kind)
    declared = hf_cfg.get("architectures")
    architecture = (
        declared[0]
        if isinstance(declared, list) and declared and isinstance(declared[0], str)
        else known.architecture
        if known
        else kind
    )
    card = {
        "source": source_name(folder, hf_cfg),
        "architecture": architecture,
        "model_type": kind,
        "origin": f"Hugging Face {architecture}, {known.trained_by if known else 'trained by its authors, not here'}",
        "parameters": info["parameters"],
        "file_bytes": info["file_bytes"],
        "weights_file": info["weights_file"],
        "computed_by": COMPUTED_BY,
    }
    if (found := licence(folder, hf_cfg)) is not None:
        card["license"] = found
    return card
