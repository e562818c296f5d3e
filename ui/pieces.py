"""Token pieces as every page shows them: through the tokenizer's own ``display``.

Ours and MarianMT's pieces are shown as stored (``▁Haus``); GPT-2's byte-level pieces as the text they stand for,
its leading space ``Ġ`` as ``␣`` (``Ġthe`` → ``␣the``, ``Ã¼`` → ``ü``). The pages turn ids and pieces into these
strings here, and hand only strings (or an id → string callable) to ``viz/``, which never sees a tokenizer.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from model.tokenizing import Tokenizer
from reading.trace import Trace
from viz.labels import word_start_note


def shown(tok: Tokenizer, pieces: Iterable[str]) -> list[str]:
    """Stored pieces (``encode(...).tokens``, a trace's tokens) → shown pieces."""
    return [tok.display(p) for p in pieces]


def of_ids(tok: Tokenizer, ids: Iterable[int]) -> list[str]:
    """The shown piece of each id (an id outside the vocabulary is ``<unk>``, as ``tok.id_to_token`` says)."""
    return shown(tok, tok.tokens(ids))


def of_id(tok: Tokenizer, token_id: int) -> str:
    """The shown piece of one id."""
    return tok.display(tok.id_to_token(int(token_id)))


def namer(tok: Tokenizer) -> Callable[[int], str]:
    """``id → shown piece``, for the figures that label ids themselves (the pipeline, the beam tree)."""
    return lambda token_id: of_id(tok, token_id)


def word_note(tok: Tokenizer) -> str:
    """How this tokenizer's pieces and word starts are shown, in one or two sentences (:func:`word_start_note`)."""
    return word_start_note(tok.kind)


def word_start(tok: Tokenizer) -> str:
    """The mark a shown piece that starts a word begins with: ``▁``, or ``␣`` for GPT-2."""
    return tok.word_start


def shown_trace(trace: Trace, tok: Tokenizer) -> Trace:
    """A copy of ``trace`` whose source and target tokens are the shown pieces (the attention tensors are shared,
    not copied)."""
    return dataclasses.replace(
        trace, src_tokens=tuple(shown(tok, trace.src_tokens)), tgt_tokens=tuple(shown(tok, trace.tgt_tokens))
    )
