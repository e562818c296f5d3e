"""What if one source word were another: under the attention-vs-attribution view, pick a word of the sentence (or,
for a language model, of the prompt), replace it or mask it with ``<unk>``, and see how the step's ten most probable
next tokens and every head's output change (:func:`reading.patching.what_if`; no hooks, the ids go in as they are).

Computed once per (checkpoint version, step, changed ids) through the gate for heavy work and shared; the step as it
is comes from its attribution's trace (:attr:`reading.attribution.StepAttribution.last`), so a what-if traces only
the changed step.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Sequence

import streamlit as st

from charts.attribution import head_change_html
from decoding.stepping import InputError, input_limit, prepare_source
from model.checkpoint import Checkpoint
from model.config import lm_prompt
from reading.attribution import StepAttribution
from reading.patching import LastQuery, WhatIf, masked, what_if
from reading.step import Step, TokenScores
from serving import heavy
from ui import pieces, presentation, url, widgets
from ui.checkpoints import checkpoint_version


class Word(NamedTuple):
    """A word of the source text: its text, its character span and the source positions of its pieces."""

    text: str
    span: tuple[int, int]
    positions: tuple[int, ...]


#: Link parameters: the toggle, the word (counted from 1) and its replacement (absent: masked with ``<unk>``).
PARAM, WORD, WITH = "whatif", "whatif_word", "whatif_with"
#: The replacement box's length (characters).
MAX_REPLACEMENT = 40


def forget_link() -> None:
    """Take the what-if's parameters out of the link (the what-if or the attribution view closed)."""
    for name in (PARAM, WORD, WITH):
        url.put(name, None)


def words(text: str, offsets: Sequence[tuple[int, int]]) -> list[Word]:
    """The whitespace-separated words of ``text`` that pieces cover (``offsets``: each piece's character span;
    an ``<eos>``'s empty span covers none)."""
    found = []
    for match in re.finditer(r"\S+", text):
        start, end = match.span()
        positions = tuple(i for i, (s, e) in enumerate(offsets) if s < e and s < end and e > start)
        if positions:
            found.append(Word(match.group(), (start, end), positions))
    return found


def top_word(found: list[Word], scores: TokenScores, decoder_only: bool) -> int:
    """The word holding the piece ``scores`` rank highest (a decoder-only prefix is ``<bos>`` + the prompt, so
    source position i is prefix position i + 1)."""
    values = scores.prefix[1:] if decoder_only else scores.source

    def strongest(word: Word) -> float:
        return max((float(values[p]) for p in word.positions if p < len(values)), default=float("-inf"))

    return max(range(len(found)), key=lambda i: strongest(found[i])) if found else 0


def changed_source(ckpt: Checkpoint, src, word: Word, replacement: str) -> tuple[int, ...]:
    """The source ids with ``word`` masked by ``<unk>`` (``replacement`` empty: the positions stay) or replaced by
    ``replacement`` (the text tokenized again; the length may change).

    Raises:
        InputError: the changed text cannot be tokenized for the model.
    """
    cfg = ckpt.config
    if not replacement.strip():
        return masked(src.ids, word.positions, cfg.unk_id)
    text = src.text[: word.span[0]] + replacement.strip() + src.text[word.span[1] :]
    return tuple(prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id).ids)


def steps(ckpt: Checkpoint, src, inputs, new_src: tuple[int, ...]) -> tuple[Step, Step]:
    """The step as it is and as it would be with ``new_src``: a translator's source, or a language model's prompt
    (the tokens it wrote after the prompt kept)."""
    cfg = ckpt.config
    if cfg.is_encoder_decoder:
        return (Step(inputs.src_ids, inputs.prefix, inputs.token_id), Step(new_src, inputs.prefix, inputs.token_id))
    written = inputs.prefix[len(lm_prompt(cfg, list(src.ids))) :]
    return (
        Step((), inputs.prefix, inputs.token_id),
        Step((), tuple(lm_prompt(cfg, list(new_src))) + tuple(written), inputs.token_id),
    )


def shared_what_if(ckpt: Checkpoint, before: Step, after: Step, last: LastQuery | None = None) -> WhatIf:
    """:func:`reading.patching.what_if` of the two steps, computed once and shared (``last``: ``before``'s
    :class:`~reading.patching.LastQuery` from its attribution, which saves tracing it again). Raises ``ValueError``
    when the changed step does not fit the model (longer than its ``max_len``)."""
    key = ("whatif", *checkpoint_version(ckpt), before, after)
    return heavy.shared(key, lambda: what_if(ckpt.model, before, after, last=last), "the what-if")


def top_rows(ckpt: Checkpoint, result: WhatIf) -> list[dict]:
    """Rank by rank: the ten next tokens as they are and with the change."""
    tok = ckpt.tokenizer
    b, a = result.before, result.after
    return [
        {
            "#": i + 1,
            "as it is": pieces.of_id(tok, b.top_ids[i]),
            "p": b.top_probs[i],
            "what if": pieces.of_id(tok, a.top_ids[i]),
            "p ": a.top_probs[i],
        }
        for i in range(len(b.top_ids))
    ]


def section(ckpt: Checkpoint, src, inputs, scores: TokenScores, keys, reading: StepAttribution | None = None) -> None:
    """The toggle and, when on, the word picker, the replacement box and what changes (``scores``: the method
    followed, whose strongest word is picked first; ``keys``: the page's
    :class:`reading_views.attribution.Keys`; ``reading``: the step's attribution, whose trace of the step as it is the
    what-if reuses). The link carries all three: ``?whatif=1&whatif_word=N&whatif_with=…``."""
    cfg, tok = ckpt.config, ckpt.tokenizer
    url.init_widget(keys.whatif, lambda p: url.bool_param(p, PARAM, False, what="what if"))
    on = st.toggle(
        "What if… (replace or mask a word)",
        key=keys.whatif,
        help="Change one word of the input and see how this step's next tokens and every head's output "
        "change: activation patching in its simplest form.",
    )
    url.put(PARAM, on, False)
    if not on:
        forget_link()
        return
    found = words(src.text, src.offsets)
    if not found:
        st.info("The input has no word to change.")
        return
    first = top_word(found, scores, not cfg.is_encoder_decoder)
    url.init_widget(
        keys.word,
        lambda p: url.index_param(p, WORD, len(found), first, what="word"),
        valid=lambda v: v in range(len(found)),
    )
    url.init_widget(keys.replacement, lambda p: url.text_param(p, WITH, "", MAX_REPLACEMENT, what="replacement"))
    c1, c2 = st.columns(2)
    index = c1.selectbox("Word", range(len(found)), key=keys.word, format_func=lambda i: f"{i + 1} · {found[i].text}")
    replacement = c2.text_input(
        "Replace with", key=keys.replacement, max_chars=MAX_REPLACEMENT, placeholder="empty: mask (<unk>)"
    )
    url.put(WORD, index + 1, first + 1)
    url.put(WITH, replacement.strip() or None)
    word = found[index]
    try:
        before, after = steps(ckpt, src, inputs, changed_source(ckpt, src, word, replacement))
        last = reading.last if reading is not None and reading.step == before else None
        result = shared_what_if(ckpt, before, after, last)
    except (InputError, ValueError) as exc:
        st.warning(f"Cannot read the changed input: {exc}")
        return
    change = (
        f"replaced by “{replacement.strip()}”"
        if replacement.strip()
        else f"masked ({len(word.positions)} piece(s) → <unk>)"
    )
    shown = pieces.of_id(tok, inputs.token_id)
    st.markdown(
        f"**“{word.text}” {change}:** p(“{shown}”) {result.before.token_prob:.3f} → {result.after.token_prob:.3f}."
    )
    widgets.show_table(top_rows(ckpt, result), wrap=True, formats={"p": "{:.3f}", "p ": "{:.3f}"})
    large = presentation.is_on()
    if cfg.is_encoder_decoder:
        st.markdown(
            head_change_html(result.cross_change, "Cross-attention heads: how far each output moved", large=large),
            unsafe_allow_html=True,
        )
    st.markdown(
        head_change_html(result.self_change, "Self-attention heads: how far each output moved", large=large),
        unsafe_allow_html=True,
    )
    st.caption(
        "‖Δ output‖ is the size of the change of a head's output Σ α·f(x) at the newest position (the units of "
        "the residual stream), with the word changed against as it is."
    )
