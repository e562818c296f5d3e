"""Loading checkpoints: where the pickable folders are, the model loaded once per process and folder version, and
the picked one for a page (or a clear message and a stop).

The model is loaded once per process and checkpoint version (``st.cache_resource`` keyed by path and modification
time) and only used under ``torch.inference_mode()``; pages never mutate it. The sidebar's picker that chooses it,
and what a switch forgets, is :func:`ui.state.checkpoint_picker`.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import streamlit as st

from model.checkpoint import Checkpoint, CheckpointError, list_checkpoints, load_checkpoint
from training.runs import safe_folders
from ui.folders import checkpoint_folder, folder_version
from ui.model_card import card_summary
from ui.page_state import APP

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT_ROOTS = [ROOT / "checkpoints"]
DEFAULT_CHECKPOINT = "en-de"
#: Extra folders (``os.pathsep``-separated) whose checkpoint subfolders are listed after those of ``checkpoints/``.
CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"


def checkpoint_roots() -> list[Path]:
    """``checkpoints/`` then the folders in ``$ATTENTION_EXPLORER_CHECKPOINTS`` (read at every call)."""
    extra = os.environ.get(CHECKPOINTS_ENV, "")
    return CHECKPOINT_ROOTS + [Path(p).expanduser() for p in extra.split(os.pathsep) if p.strip()]


def available_checkpoints() -> dict[str, Path]:
    """Display name → folder, for every checkpoint folder under the :func:`checkpoint_roots` (first name wins)."""
    found: dict[str, Path] = {}
    for root in checkpoint_roots():
        # a link's ?ckpt= can then only name a folder that is there, by a plain name, and no link out of its root
        for path in safe_folders(root, list_checkpoints(root)):
            found.setdefault(path.name, path)
    return found


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _load(path: str, mtime: float) -> Checkpoint:  # mtime is part of the cache key
    ckpt = load_checkpoint(path)
    # Everything alive now (torch, the libraries, this model) lives as long as the process: moved out of the
    # collector's sight, a full collection no longer walks it, and the collections that a room of visitors'
    # script runs trigger stay cheap for every session sharing the interpreter lock.
    gc.freeze()
    return ckpt


def load_other(folder: Path) -> tuple[Checkpoint | None, str | None]:
    """Load a second checkpoint (e.g. to compare), cached like the first: ``(checkpoint, None)`` or ``(None, why)``."""
    try:
        return _load(str(folder), folder_version(Path(folder))), None
    except CheckpointError as exc:
        return None, str(exc)


def require_checkpoint(summary: bool = True) -> Checkpoint:
    """The picked checkpoint, loaded, with its summary in the sidebar (unless not ``summary``: a fragment cannot
    write there).

    When there is none or it cannot load, a clear message is shown in the page and the script stops there
    (``st.stop``), so a page's code below never runs without a model.
    """
    folder = st.session_state.get(APP.ckpt.sub("path"))
    if folder is None:
        st.error(
            "No model is available. Put a checkpoint folder under `checkpoints/` or train one "
            "(`python -m trainer.train --out runs/NAME`)."
        )
        st.stop()
    try:
        ckpt = _load(str(folder), folder_version(Path(folder)))
    except CheckpointError as exc:
        st.error(f"This checkpoint cannot be loaded: {exc}. Pick another one in the sidebar.")
        st.stop()
    if (ckpt.card or {}).get("direction") == "de-en":  # every page reads English and writes German
        st.error(
            "This checkpoint translates German → English: it is a back-translation model "
            "(`python -m trainer.train --reverse`), which makes synthetic pairs for an English → German one. "
            "The pages explore English → German translators and language models: pick another one in the "
            "sidebar."
        )
        st.stop()
    if summary:
        st.sidebar.caption(card_summary(ckpt))
    return ckpt


def checkpoint_version(ckpt: Checkpoint) -> tuple[str, float]:
    """``(folder, modification time)`` of a loaded checkpoint: a cache key that changes when the files do."""
    return str(ckpt.path), folder_version(checkpoint_folder(ckpt))
