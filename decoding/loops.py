"""Loops in a model's output: one word or a short phrase written again and again, back to back.

Greedy decoding takes the most probable token at every step and never weighs what it has already written. Once a
phrase is in the context, writing it again is often the likeliest continuation, and each repeat makes the next one
likelier still: Holtzman et al. (2020, "The Curious Case of Neural Text Degeneration", §3 and Fig. 4) measured how
the probability of a repeated phrase grows with every repetition. A language model loops this way on ordinary
prompts; a translator loops when it is lost (a sentence far from its training text), falling back on its commonest
word ("die die die …").

Words here are whitespace-separated with the punctuation around them stripped, so ", die die Stadt" counts "die"
twice in a row (which is right German: a relative pronoun before an article) and "A. A. A." three times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

#: A phrase must come this many times in a row to count as a loop: twice is often the language ("Pago Pago",
#: ", die die …"), three times almost never.
LOOP_TIMES = 3
#: The longest phrase looked for, in words (longer loops contain a shorter repeated run or are rare).
LOOP_MAX_WORDS = 4
#: The longest phrase the decoding guard (:func:`loop_completions`) looks for, in tokens: four words of up to two
#: pieces each.
GUARD_MAX_TOKENS = 8
_PUNCTUATION = ".,;:!?\"'()„“”‚‘’«»"


def words(text: str) -> list[str]:
    """The words of ``text``: split on whitespace, punctuation stripped from both ends, empty ones dropped."""
    return [w for w in (x.strip(_PUNCTUATION) for x in text.split()) if w]


def longest_repeat(text: str) -> int:
    """The longest run of one word repeated back to back in ``text`` (case kept, punctuation stripped); 0 if empty."""
    ws = words(text)
    best = run = 0
    for i, w in enumerate(ws):
        run = run + 1 if i and w == ws[i - 1] else 1
        best = max(best, run)
    return best


@dataclass(frozen=True)
class Loop:
    """A phrase of ``len(phrase)`` words written ``times`` times in a row, starting at word ``start`` of the text."""

    phrase: tuple[str, ...]
    times: int
    start: int

    @property
    def text(self) -> str:
        return " ".join(self.phrase)

    def message(self, writes: str = "translation") -> str:
        """Two sentences for a page: what loops, and why greedy decoding does it. ``writes``: "translation" or
        "continuation"."""
        then = (
            "A translator does it when it is lost, on a sentence far from its training text."
            if writes == "translation"
            else "Sampling (Decoding lab) breaks such loops."
        )
        return (
            f"**The {writes} goes round in a loop:** “{self.text}” {self.times} times in a row. Greedy decoding "
            "always takes the most probable token, and a phrase once written is often the likeliest to come "
            f"again (Holtzman et al. 2020). {then}"
        )


def find_loop(text: str, times: int = LOOP_TIMES, max_words: int = LOOP_MAX_WORDS) -> Loop | None:
    """The longest-running loop of ``text`` (a phrase of 1 to ``max_words`` words repeated at least ``times`` times
    back to back; most repeated words first, then the shorter phrase), or ``None``. A phrase that is one word
    repeated ("die die") counts as that word, not as a two-word phrase."""
    ws = words(text)
    best: Loop | None = None
    for n in range(1, max_words + 1):
        i = 0
        while i + n * times <= len(ws):
            phrase = ws[i : i + n]
            k = 1
            while ws[i + k * n : i + (k + 1) * n] == phrase:
                k += 1
            if k >= times and not (n > 1 and len(set(phrase)) == 1):
                found = Loop(tuple(phrase), k, i)
                if best is None or found.times * n > best.times * len(best.phrase):
                    best = found
                i += k * n
            else:
                i += 1
    return best


def loop_completions(ids: Sequence[int], times: int = LOOP_TIMES, max_tokens: int = GUARD_MAX_TOKENS) -> set[int]:
    """The tokens that, written next, would end ``ids`` with a phrase of 1 to ``max_tokens`` tokens written ``times``
    times back to back: the tokens a decoding guard bans so that no phrase comes ``times`` times in a row.

    For each phrase length ``n`` there is at most one such token, ``ids[-n]``, and only when the last
    ``times × n − 1`` tokens repeat with period ``n``: O(``max_tokens``² × ``times``) per step. This is the
    back-to-back case of fairseq's and Hugging Face's ``no_repeat_ngram_size`` (which bans every n-gram written
    before, anywhere): a translation may say "in der Stadt" twice in a sentence, never three times in a row.

    Args:
        ids: the tokens generated so far (no ``<bos>``).
        times: 2 bans even one repeat; 3 (:data:`LOOP_TIMES`) lets a phrase come twice, as German sometimes does.

    Raises:
        ValueError: ``times`` below 2.
    """
    if times < 2:
        raise ValueError(f"a loop is a phrase written at least twice in a row, not {times} times")
    banned: set[int] = set()
    length = len(ids)
    for n in range(1, max_tokens + 1):
        span = times * n - 1
        if span > length:
            break
        tail = ids[length - span :]
        if all(tail[i] == tail[i + n] for i in range(span - n)):
            banned.add(tail[span - n])
    return banned


def ban_loops(logits: torch.Tensor, sequences: Sequence[Sequence[int] | None], times: int) -> None:
    """The loop guard of a decoding step: set to −∞, in place, each row's logits (or log-probabilities) of the
    tokens :func:`loop_completions` names for that row's tokens so far.

    Args:
        logits: ``[rows, vocab]``, one row per sequence being decoded.
        sequences: the tokens generated so far in each row (no ``<bos>``), ``None`` for a row to leave alone (a
            finished sentence).
        times: as :func:`loop_completions`.
    """
    for row, seq in enumerate(sequences):
        if seq is not None and (banned := loop_completions(seq, times)):
            logits[row, sorted(banned)] = float("-inf")
