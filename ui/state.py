"""Streamlit glue shared by the pages: the checkpoint picker, the current sentence, and its decoding and trace.

Loading a checkpoint (once per process and folder version) is :mod:`ui.checkpoints`, whose names are also
reachable from here (``state.require_checkpoint``), as the pages have always called them. The sentence and
the decoding step live in ``st.session_state`` and in the URL query parameters (``?ckpt=…&text=…&step=…``,
read and written through :mod:`ui.url`), so a reload or a shared link shows the same view.

A decoding is never kept as a mutable object in the session. Streamlit starts the run for a new click while the
run for the previous one may still be executing (fast reruns), so two runs of one session can overlap: the
session holds only the step number, and the decoding is computed to its end once per (checkpoint version,
token ids), frozen (:class:`decoding.decoded.Decoding`), cached and shared by every run of every session
(:func:`greedy_run`); a step is an index into it (:class:`decoding.decoded.StepView`).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, cast

import streamlit as st

from decoding.decoded import Decoding, decode
from decoding.loops import LOOP_TIMES
from decoding.stepping import InputError, SourceInput, Stepper, input_limit, prepare_source
from model.checkpoint import Checkpoint
from model.hf.generation import GenerationDefaults, decoding_cap, forced_eos
from model.tokenizer import MOSTLY_UNKNOWN, unknown_share
from reading.familiarity import familiarity
from reading.trace import Trace, trace_pair
from serving import batcher, heavy
from ui import url
from ui.checkpoints import (
    DEFAULT_CHECKPOINT,
    available_checkpoints,
    checkpoint_version,
)
from ui.folders import checkpoint_label, folder_arch
from ui.limits import limits
from ui.page_state import APP, PAGES, TRANSLATE, Field, forget
from ui.pieces import shown_trace

#: Sentences to translate, every page's default first. The shipped translator gets each of them right (greedy; the
#: test of the presets holds its outputs) except those in :data:`HARD_PRESETS`, which come last.
PRESETS = [
    "My brother lives in Berlin.",
    "A dog runs through the snow.",
    "Thank you very much.",
    "The weather is nice today.",
    "The cat sat on the mat.",
    "The woman gave the man a book.",
    "The girl who is wearing a red dress is my sister.",
    "Alice went to the market and bought apples.",
    "He played the piano.",
    "I would like a cup of coffee.",
    "The animal didn't cross the street because it was too tired.",
    "Time flies like an arrow.",
    "Bobby likes blackberries.",
]
#: Presets kept although the shipped translator gets them wrong, because the mistake teaches: what goes wrong, as
#: the presets box shows it.
HARD_PRESETS = {
    "Time flies like an arrow.": "hard: a made-up word",  # "… wie eine Pfeilung": "Pfeil" and a suffix
    "Bobby likes blackberries.": "hard: a rare word",
}


def preset_label(text: str) -> str:
    """How the presets box shows a preset: the sentence, and for one of :data:`HARD_PRESETS` what goes wrong."""
    return f"{text}  ·  {HARD_PRESETS[text]}" if text in HARD_PRESETS else text


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


def checkpoint_picker() -> Path | None:
    """Sidebar selectbox of checkpoints; the choice is kept in ``?ckpt=``. Returns the folder or ``None``."""
    options = available_checkpoints()
    if not options:
        st.sidebar.error("No checkpoint found under `checkpoints/`. Train one with `python -m trainer.train`.")
        return None
    names = sorted(options, key=lambda n: n != DEFAULT_CHECKPOINT)  # the default first, the rest as found
    wanted, note = url.choice_param(st.query_params, "ckpt", names, names[0], what="checkpoint")
    if note:
        st.sidebar.warning(note)
    labels = {n: checkpoint_label(n, options[n]) for n in names}  # the values stay names: ?ckpt= links hold them
    name = st.sidebar.selectbox(
        "Checkpoint",
        names,
        index=names.index(wanted),
        key="app_ckpt",
        format_func=labels.__getitem__,
        on_change=_on_checkpoint_change,
        args=(options,),
    )
    url.put("ckpt", name, names[0])  # the default checkpoint stays out of the link, also after switching back
    return options[name]


def _on_checkpoint_change(options: dict[str, Path]) -> None:
    """Picker callback, before the page is drawn for the new model.

    The layer, head and kind choices are forgotten, in the session and in the link, so the pages start the new
    model at its own defaults (its last layer, say), not at an index the old model's user picked, or the old
    model's default, which the new model merely happens to have too. A lecture preset of the other kind of model
    (a sentence to translate, a prompt to continue) is replaced by the new model's default preset; a text the user
    typed is kept."""
    ss = st.session_state
    forget("model", ss, st.query_params)
    folder = options.get(ss.get(APP.ckpt.key, ""))
    text = ss.get(APP.sentence.key)
    if folder is None or text is None:
        return
    presets = presets_for_arch(folder_arch(folder))
    if text not in presets and text in PRESETS + LM_PRESETS:
        use_text(presets[0])


# --- the sentence being explored --------------------------------------------------------------------
def presets_for_arch(arch: str) -> list[str]:
    """The lecture presets for an architecture: sentences to translate, or prompts for a decoder-only model."""
    return LM_PRESETS if arch == "decoder-only" else PRESETS


def presets_for(ckpt: Checkpoint) -> list[str]:
    """The lecture presets for this model (:func:`presets_for_arch`)."""
    return presets_for_arch(ckpt.config.arch)


def input_label(ckpt: Checkpoint) -> str:
    """What the text box holds: an English sentence to translate, or a prompt to continue."""
    return "English prompt (the model continues it)" if ckpt.config.arch == "decoder-only" else "English sentence"


def current_text(ckpt: Checkpoint) -> str:
    """The sentence shared by the pages (``?text=``, at most :func:`ui.limits.limits`' ``max_chars`` characters, else
    the first preset for ``ckpt``)."""
    if "app_text" not in st.session_state:
        text, note = url.text_param(st.query_params, "text", presets_for(ckpt)[0], limits().max_chars)
        st.session_state["app_text"] = text
        url.show_notes(note)
    return st.session_state["app_text"]


def use_text(text: str) -> None:
    """Make ``text`` the shared sentence from a callback (before any widget is drawn): every page's text box shows
    it and what belonged to the old sentence is forgotten (the decoding starts again at step 0)."""
    st.session_state[APP.sentence.key] = text
    forget("sentence", st.session_state, st.query_params)
    for page in PAGES:
        page.show_sentence(st.session_state, text)


def default_text() -> str:
    """The sentence a link without ``?text=`` shows: the first lecture preset for the picked checkpoint's kind of
    model (:func:`current_text` reads the link with it)."""
    folder = st.session_state.get("app_ckpt_path")
    return presets_for_arch(folder_arch(folder))[0] if folder is not None else PRESETS[0]


def set_text(text: str) -> None:
    """The page's text box holds ``text``: share it with the other pages and put it in the link (a new text starts
    at step 0). The default sentence is left out of the link, as every default is; a text too long for the link is
    left out too, with a caption saying so."""
    if text != st.session_state.get("app_text"):  # a new sentence: no page keeps its step or sweep, nor the link
        st.session_state[APP.sentence.key] = text
        forget("sentence", st.session_state, st.query_params)
    note = url.put_text("text", text, default_text())
    if note:
        st.caption(note)


def own_text_label(ckpt: Checkpoint) -> str:
    """The presets box's entry for a text that is not a preset."""
    return "— your own prompt —" if ckpt.config.arch == "decoder-only" else "— your own sentence —"


def sentence_box(ckpt: Checkpoint, box: Field) -> str:
    """The "Lecture presets" selectbox beside a one-line text box (Enter applies it), the page's ``box`` (its key;
    the presets box's: ``box.sub("preset")``). Returns the typed text.

    The selectbox follows the box: it shows the preset the box holds, or :func:`own_text_label` once the user
    has typed a text of their own.
    """
    ss = st.session_state
    text_key, preset_key = box.key, box.sub("preset")
    presets = presets_for(ckpt)
    if text_key not in ss:
        ss[text_key] = current_text(ckpt)
    own = own_text_label(ckpt)
    ss[preset_key] = ss[text_key] if ss[text_key] in presets else own

    def use_preset() -> None:
        if ss.get(preset_key) in presets:
            ss[text_key] = ss[preset_key]

    col_preset, col_text = st.columns([1.4, 2])  # at 1280 px a preset's full sentence fits its box
    col_preset.selectbox(
        "Lecture presets", [own] + presets, key=preset_key, on_change=use_preset, format_func=preset_label
    )
    return col_text.text_input(input_label(ckpt), key=text_key)


def current_step(total: int, key: str = TRANSLATE.step.key) -> int:
    """The decoding step shown, within ``[0, total]``: ``st.session_state[key]``, first read from ``?step=``
    (clamped, with a note). The step is written back into the link (step 0 is left out)."""
    ss = st.session_state
    if key not in ss:
        ss[key], note = url.int_param(st.query_params, "step", 0, 0, total)
        url.show_notes(note)
    step = min(max(int(ss[key]), 0), total)
    if step != ss[key]:
        ss[key] = step
    url.put("step", step, 0)
    return step


def source_for(ckpt: Checkpoint, text: str, brief: bool = False) -> SourceInput | None:
    """Tokenize ``text`` for the model, showing any problem or note in the page, and a warning when the text is far
    from what the model has seen (:mod:`reading.familiarity`; ``brief``: its two-line form). ``None`` if unusable."""
    too_long = limits().too_long(text)
    if too_long:
        st.warning(too_long)
        return None
    try:
        src, warning = _read_source(ckpt, text, brief)
    except InputError as exc:
        st.warning(str(exc))
        return None
    for note in src.notes:
        st.info(note)
    if warning:
        st.warning(warning)
    return src


#: What :func:`source_for` says of a text the model's vocabulary has no pieces for.
UNREADABLE = (
    "The model cannot read most of this text: its vocabulary has no pieces for these characters, which it sees as "
    "<unk>. Whatever it writes below is made up, not a translation."
)


def _read_source(ckpt: Checkpoint, text: str, brief: bool) -> tuple[SourceInput, str]:
    """``text`` tokenized for the model and the warning to show with it ('' for none; ``brief``: its two-line form),
    read once per checkpoint version and text and kept for the room in the gate's cache
    (:meth:`serving.heavy.Gate.keep`, within its byte budget): three tokenizations on every run of every page that
    shows a sentence were ~3 % of a Next click's time in the server's interpreter. Both forms of the warning are kept
    with it, so Translate (brief) and the other pages read a shared sentence once. Kept as tuples; each call gets its
    own :class:`SourceInput`.

    Raises:
        InputError: as :func:`decoding.stepping.prepare_source` (not kept: it is said again on each run).
    """
    cfg = ckpt.config
    key = ("source", *checkpoint_version(ckpt), text)
    kept = heavy.GATE.lookup(key)
    if kept is heavy.MISSING:
        src = prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)
        if unknown_share(ckpt.tokenizer, src.text) > MOSTLY_UNKNOWN:
            warnings = (UNREADABLE, UNREADABLE)
        else:
            kind = "translation" if cfg.is_encoder_decoder else "continuation"
            far = familiarity(ckpt.tokenizer, src.text)
            warnings = (far.message(kind) or "", far.message(kind, brief=True) or "")
        offsets = tuple((start, end) for start, end in src.offsets)
        kept = _Read(src.text, tuple(src.ids), tuple(src.tokens), offsets, src.truncated, tuple(src.notes), *warnings)
        heavy.GATE.keep(key, kept)
    r = cast(_Read, kept)
    src = SourceInput(r.text, list(r.ids), list(r.tokens), list(r.offsets), r.truncated, list(r.notes))
    return src, r.brief_warning if brief else r.warning


class _Read(NamedTuple):
    """A :class:`SourceInput` and its warning as :func:`_read_source` keeps them for the room: immutable."""

    text: str
    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    offsets: tuple[tuple[int, int], ...]
    truncated: bool
    notes: tuple[str, ...]
    warning: str
    brief_warning: str  #: the warning's two-line form (Translate's, above a projector's step view)


def new_stepper(
    model, src_ids: list[int], generation: GenerationDefaults | None = None, loop_times: int = 0
) -> Stepper:
    """A :class:`Stepper` for either architecture: an encoder-decoder translates ``src_ids``; a decoder-only model
    continues them (the text without its ``<eos>`` becomes the prompt after ``<bos>``). Its length cap is a Hugging
    Face model's own (``generation``: ``ckpt.generation``, :func:`~model.hf.generation.decoding_cap`), else ours,
    and a decoding that reaches it ends with the token its generation config forces there, if any. ``loop_times``:
    the stepper's loop guard (0 = none)."""
    return Stepper(
        model,
        src_ids,
        max_new_tokens=decoding_cap(model.cfg, src_ids, generation),
        forced_eos_id=forced_eos(generation),
        loop_times=loop_times,
    )


def greedy_run(ckpt: Checkpoint, src: SourceInput) -> Decoding:
    """The greedy decoding of ``src`` run to its end (``<eos>`` or the length limit), frozen, computed once per
    checkpoint version and ids and shared by every run and session (a step: :meth:`decoding.decoded.StepView.of`).
    A translator's sentences arriving together are decoded in one batch (:data:`serving.batcher.FIRST_DECODES`, the same
    tokens and records as alone); a decoder-only model's prompt alone, through the gate for heavy work."""
    version = checkpoint_version(ckpt)  # stats the folder's files: once per run
    key = ("greedy", *version, tuple(src.ids))
    if ckpt.config.is_encoder_decoder:
        return batcher.batched(batcher.FIRST_DECODES, key, (ckpt, tuple(src.ids)), "the translation", group=version)
    return heavy.shared(
        key, lambda: decode(new_stepper(ckpt.model, list(src.ids), ckpt.generation)), "the continuation"
    )


def traced(ckpt: Checkpoint, src: SourceInput, tgt_ids: list[int]) -> tuple[Trace, Trace]:
    """The traced forward pass of ``src`` and the decoder inputs ``tgt_ids`` (:func:`reading.trace.trace_pair`), as
    computed and with its pieces as the pages show them (:func:`ui.pieces.shown_trace`): frozen, computed once per
    checkpoint version and sentence through the gate for heavy work (:mod:`serving.heavy`), shared by every session."""
    offsets = tuple((start, end) for start, end in src.offsets)

    def compute() -> tuple[Trace, Trace]:
        raw = trace_pair(ckpt.model, ckpt.tokenizer, list(src.ids), list(tgt_ids), list(offsets))
        return raw, shown_trace(raw, ckpt.tokenizer)

    return heavy.shared(
        ("trace", *checkpoint_version(ckpt), tuple(src.ids), tuple(tgt_ids), offsets),
        compute,
        "the attention of this sentence",
    )


def guarded_translation(ckpt: Checkpoint, src: SourceInput, times: int = LOOP_TIMES) -> str:
    """What :func:`greedy_run` writes for ``src`` with the loop guard (no phrase ``times`` times in a row; the same
    stepper, length cap and forced end), as text: computed once per checkpoint version and ids through the gate for
    heavy work, shared by every session."""

    def compute() -> str:
        stepper = new_stepper(ckpt.model, list(src.ids), ckpt.generation, loop_times=times)
        stepper.run_to_end()
        return ckpt.tokenizer.decode(stepper.output_ids())

    return heavy.shared(
        ("guarded", times, *checkpoint_version(ckpt), tuple(src.ids)), compute, "the translation without the loop"
    )


def full_translation(ckpt: Checkpoint, src: SourceInput) -> tuple[list[int], list[int]]:
    """Greedy decode to the end: ``(all decoder ids — <bos>, a decoder-only prompt, the output, <eos> —, output ids
    without them)`` (copies; cached)."""
    run = greedy_run(ckpt, src)
    return list(run.tokens), run.output_ids()
