"""Streamlit glue shared by the pages: the checkpoint picker, cached loading, and the current sentence.

The model is loaded once per process and checkpoint version (``st.cache_resource`` keyed by path and
modification time) and only used under ``torch.inference_mode()``; pages never mutate it. The sentence and
the decoding step live in ``st.session_state`` and in the URL query parameters (``?ckpt=…&text=…&step=…``),
so a reload or a shared link shows the same view.
"""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from model.checkpoint import Checkpoint, CheckpointError, list_checkpoints, load_checkpoint
from model.decoding import (InputError, SourceInput, Stepper, default_max_new_tokens, input_limit,
                            prepare_source)

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT_ROOTS = [ROOT / "checkpoints"]
DEFAULT_CHECKPOINT = "en-de"
#: Extra folders (``os.pathsep``-separated) whose checkpoint subfolders are listed after those of ``checkpoints/``.
CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"

PRESETS = [
    "Bobby likes blackberries.",
    "Let us think logically.",
    "The animal didn't cross the street because it was too tired.",
    "The cat sat on the mat.",
    "He played the piano beautifully.",
    "Alice went to the market. She bought apples.",
    "Time flies like an arrow.",
]

#: Prompts for a decoder-only model. It learned one sentence per sequence, so a finished sentence ("… .") is
#: usually followed by <eos> at once: these are openings it can continue.
LM_PRESETS = [
    "Bobby likes",
    "The animal didn't cross the street because it",
    "The jury said that",
    "She looked at him and",
    "In the morning, the",
    "Time flies like",
]

#: Hosted-demo mode (``ATTENTION_EXPLORER_DEMO=1``): shorter inputs and decodes.
DEMO_MODE = os.environ.get("ATTENTION_EXPLORER_DEMO", "") not in ("", "0", "false")
DEMO_MAX_CHARS = 300


def checkpoint_roots() -> list[Path]:
    """``checkpoints/`` then the folders in ``$ATTENTION_EXPLORER_CHECKPOINTS`` (read at every call)."""
    extra = os.environ.get(CHECKPOINTS_ENV, "")
    return CHECKPOINT_ROOTS + [Path(p).expanduser() for p in extra.split(os.pathsep) if p.strip()]


def available_checkpoints() -> dict[str, Path]:
    """Display name → folder, for every checkpoint folder under the :func:`checkpoint_roots` (first name wins)."""
    found: dict[str, Path] = {}
    for root in checkpoint_roots():
        for path in list_checkpoints(root):
            found.setdefault(path.name, path)
    return found


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _load(path: str, mtime: float) -> Checkpoint:  # mtime is part of the cache key
    return load_checkpoint(path)


def _mtime(path: Path) -> float:
    try:
        return max((path / f).stat().st_mtime for f in ("model.safetensors", "config.json", "tokenizer.json"))
    except OSError:
        return 0.0


def load_other(folder: Path) -> tuple[Checkpoint | None, str | None]:
    """Load a second checkpoint (e.g. to compare), cached like the first: ``(checkpoint, None)`` or ``(None, why)``."""
    try:
        return _load(str(folder), _mtime(Path(folder))), None
    except CheckpointError as exc:
        return None, str(exc)


def checkpoint_picker() -> Path | None:
    """Sidebar selectbox of checkpoints; the choice is kept in ``?ckpt=``. Returns the folder or ``None``."""
    options = available_checkpoints()
    if not options:
        st.sidebar.error("No checkpoint found under `checkpoints/`. Train one with `python -m model.train`.")
        return None
    names = sorted(options, key=lambda n: n != DEFAULT_CHECKPOINT)  # the default first, the rest as found
    wanted = st.query_params.get("ckpt", DEFAULT_CHECKPOINT)
    if wanted not in options:
        if "ckpt" in st.query_params:
            st.sidebar.warning(f"Checkpoint “{wanted}” is not available; showing “{names[0]}”.")
        wanted = names[0]
    name = st.sidebar.selectbox("Checkpoint", names, index=names.index(wanted), key="ckpt_name")
    if name != DEFAULT_CHECKPOINT or "ckpt" in st.query_params:
        st.query_params["ckpt"] = name
    return options[name]


def require_checkpoint() -> Checkpoint:
    """The picked checkpoint, loaded, with its summary in the sidebar.

    When there is none or it cannot load, a clear message is shown in the page and the script stops there
    (``st.stop``), so a page's code below never runs without a model.
    """
    folder = st.session_state.get("_ckpt_path")
    if folder is None:
        st.error("No model is available. Put a checkpoint folder under `checkpoints/` or train one "
                 "(`python -m model.train --out runs/NAME`).")
        st.stop()
    try:
        ckpt = _load(str(folder), _mtime(Path(folder)))
    except CheckpointError as exc:
        st.error(f"This checkpoint cannot be loaded: {exc}. Pick another one in the sidebar.")
        st.stop()
    st.sidebar.caption(card_summary(ckpt))
    return ckpt


def card_summary(ckpt: Checkpoint) -> str:
    """One line about the model for the sidebar."""
    card, cfg = ckpt.card, ckpt.config
    parts = [f"{cfg.arch}, d_model {cfg.d_model}, {cfg.n_heads} heads, "
             f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"]
    if card.get("hardware"):
        parts.append(f"trained {card.get('train_minutes', '?')} min on {card['hardware']}")
    test = card.get("test")
    if isinstance(test, dict) and "bleu" in test and "chrf" in test:
        parts.append(f"test BLEU {test['bleu']:.1f} · chrF {test['chrf']:.1f}")
    elif isinstance(test, dict) and "perplexity" in test:  # a language model
        parts.append(f"test perplexity {test['perplexity']:.1f}")
    return " · ".join(parts)


# --- the sentence being explored --------------------------------------------------------------------
def presets_for(ckpt: Checkpoint) -> list[str]:
    """The lecture presets for this model: sentences to translate, or prompts for a decoder-only model."""
    return LM_PRESETS if ckpt.config.arch == "decoder-only" else PRESETS


def input_label(ckpt: Checkpoint) -> str:
    """What the text box holds: an English sentence to translate, or a prompt to continue."""
    return "English prompt (the model continues it)" if ckpt.config.arch == "decoder-only" else "English sentence"


def current_text(ckpt: Checkpoint) -> str:
    """The sentence shared by the pages (``?text=``, else the first preset for ``ckpt``)."""
    if "text" not in st.session_state:
        st.session_state["text"] = st.query_params.get("text", presets_for(ckpt)[0])
    return st.session_state["text"]


def set_text(text: str) -> None:
    if text != st.session_state.get("text"):
        st.session_state["text"] = text
        st.session_state["step"] = 0
        st.query_params.pop("step", None)  # a new sentence starts at step 0; keep the URL in agreement
    st.query_params["text"] = text


def current_step() -> int:
    """The decoding step shown (``?step=``), clamped to ``≥ 0``; garbage in the URL counts as 0."""
    if "step" not in st.session_state:
        try:
            st.session_state["step"] = max(0, int(st.query_params.get("step", 0)))
        except (TypeError, ValueError):
            st.session_state["step"] = 0
    return st.session_state["step"]


def set_step(step: int) -> None:
    st.session_state["step"] = max(0, int(step))
    st.query_params["step"] = str(st.session_state["step"])


def source_for(ckpt: Checkpoint, text: str) -> SourceInput | None:
    """Tokenize ``text`` for the model, showing any problem or note in the page. ``None`` if unusable."""
    if DEMO_MODE and len(text) > DEMO_MAX_CHARS:
        st.warning(f"The hosted demo takes up to {DEMO_MAX_CHARS} characters; please shorten the text.")
        return None
    cfg = ckpt.config
    try:
        src = prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)
    except InputError as exc:
        st.warning(str(exc))
        return None
    for note in src.notes:
        st.info(note)
    return src


def new_stepper(model, src_ids: list[int]) -> Stepper:
    """A :class:`Stepper` for either architecture: an encoder-decoder translates ``src_ids``; a decoder-only model
    continues them (the text without its ``<eos>`` becomes the prompt after ``<bos>``)."""
    return Stepper(model, src_ids, max_new_tokens=default_max_new_tokens(model.cfg, len(src_ids)))


def stepper_for(ckpt: Checkpoint, src: SourceInput) -> Stepper:
    """A :class:`Stepper` for this checkpoint and sentence, kept in the session so that stepping is incremental."""
    key = (str(ckpt.path), tuple(src.ids))
    held = st.session_state.get("_stepper")
    if held is None or held[0] != key:
        held = (key, new_stepper(ckpt.model, src.ids))
        st.session_state["_stepper"] = held
    return held[1]


@st.cache_data(show_spinner=False, max_entries=256)
def _full_translation(path: str, mtime: float, src_ids: tuple[int, ...]) -> tuple[list[int], list[int]]:
    ckpt = _load(path, mtime)
    stepper = new_stepper(ckpt.model, list(src_ids))
    stepper.run_to_end()
    return stepper.tokens, stepper.output_ids()


def checkpoint_version(ckpt: Checkpoint) -> tuple[str, float]:
    """``(folder, modification time)`` of a loaded checkpoint: a cache key that changes when the files do."""
    return str(ckpt.path), _mtime(Path(ckpt.path))


def full_translation(ckpt: Checkpoint, src: SourceInput) -> tuple[list[int], list[int]]:
    """Greedy decode to the end: ``(all decoder ids — <bos>, a decoder-only prompt, the output, <eos> —, output ids
    without them)`` (cached)."""
    return _full_translation(str(ckpt.path), _mtime(Path(ckpt.path)), tuple(src.ids))
