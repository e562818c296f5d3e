"""How far a text is from what a model has read: the share of its words the tokenizer cuts into pieces.

A subword vocabulary (BPE, Sennrich et al. 2016; SentencePiece unigram, Kudo 2018) keeps a word whole when it was
frequent in the text the vocabulary was learned from, and cuts a rare word into smaller, more frequent pieces. The
share of a sentence's words that are cut is therefore a measure of how rare its words were in that text — for our
checkpoints, the training data of the model itself — that needs nothing but the tokenizer: no reference, no second
model, a few microseconds per sentence.

Measured with the shipped translator's 16k BPE, learned with news and Wikipedia in its text, on the English side
of each test set (``python -m evaluation.evaluate --suite --pieces``, docs/data.md): a sentence is *far*
(:func:`familiarity`) when at least :data:`FAR_SPLIT_SHARE` of its words and at least :data:`FAR_MIN_SPLIT` words are
cut. That flags 2 % of the Tatoeba held-out sentences, 1 % of the everyday set and 6 % of Multi30K test2016, against
35 % of FLORES-200 devtest (Wikipedia) and 29 % of newstest2014 (news) (with the 8k BPE before it, learned from
everyday text only: 77 % and 78 %). Measured again for the 16k BPE, the thresholds stay: in every set the flagged
sentences translate worse than the others (the suite reports both chrF), by 12–14 points in Multi30K and Tatoeba,
by 1.4 in FLORES; a share of 0.2 would flag 71 % of FLORES, whose flagged sentences then score only 0.8 below the
rest, and a higher share flags fewer sentences for a gap that grows in one set and shrinks in another.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from model import tokenizing

#: A sentence with at least this share of its words cut into pieces is far from what the model has seen …
FAR_SPLIT_SHARE = 0.3
#: … provided at least this many words are cut (one rare name in a three-word sentence is no sign of a domain).
FAR_MIN_SPLIT = 3

_WORD = re.compile(r"\w+")
#: Where a word opens a sentence: the text's first word, or one after ., ! or ? (quotes and brackets between).
_SENTENCE_START = re.compile(r"(?:^|[.!?][\s\"'”’)\]]*\s)[\"'“‘(\[]*(?=\w)")


def word_pieces(tokenizer: tokenizing.Tokenizer, text: str) -> list[tuple[str, int]]:
    """``(word, pieces)`` for each word of ``text``: a run of letters and digits (``\\w+``, so "didn't" is two
    words and punctuation none) and the number of the tokenizer's pieces that overlap it (1: a whole piece of the
    vocabulary). Counted on the NFC form of ``text``, as the tokenizer reads it."""
    text = unicodedata.normalize("NFC", text or "")
    offsets = sorted(tokenizer.encode(text).offsets)
    counted, first = [], 0
    for m in _WORD.finditer(text):  # one sweep: words and pieces both run left to right
        while first < len(offsets) and offsets[first][1] <= m.start():
            first += 1
        n, i = 0, first
        while i < len(offsets) and offsets[i][0] < m.end():
            n += offsets[i][1] > m.start()
            i += 1
        counted.append((m.group(), n))
    return counted


@dataclass(frozen=True)
class Familiarity:
    """How rare the words of one text were for a tokenizer (:func:`familiarity`).

    Attributes:
        words: words in the text (``\\w+`` runs).
        split: the words cut into two or more pieces, in text order, each once.
        split_count: how many words were cut (a word cut twice in the text counts twice).
        times: how often each word of ``split`` stands in the text, cut (they add up to ``split_count``; empty: once
            each).
    """

    words: int
    split: tuple[str, ...]
    split_count: int
    times: tuple[int, ...] = ()

    @property
    def split_share(self) -> float:
        """Share of the words cut into pieces, 0.0–1.0 (0.0 for a text without words)."""
        return self.split_count / self.words if self.words else 0.0

    @property
    def far(self) -> bool:
        """At least :data:`FAR_MIN_SPLIT` words and :data:`FAR_SPLIT_SHARE` of them are cut into pieces."""
        return self.split_count >= FAR_MIN_SPLIT and self.split_share >= FAR_SPLIT_SHARE

    def message(self, what: str = "translation", brief: bool = False) -> str | None:
        """A plain sentence for the reader when the text is :attr:`far`, naming a few of the cut words; ``None``
        otherwise. ``what``: what the model writes ("translation", "continuation"). ``brief``: two words named and
        no explanation, short enough for two lines above a projector's step view."""
        if not self.far:
            return None
        # a word that stands twice is named once with how often: the names add up to the count the sentence gives
        times = self.times or (1,) * len(self.split)
        named = 2 if brief else 4
        shown = ", ".join(
            f"“{w}”" + ("" if n == 1 else " twice" if n == 2 else f" {n} times")
            for w, n in zip(self.split[:named], times[:named], strict=True)
        )
        shown += ", …" if len(self.split) > named else ""
        if brief:
            return (
                f"Far from what this model has seen: {self.split_count} of its {self.words} words were rare in its "
                f"training text ({shown}). Expect a poor {what}."
            )
        return (
            f"Far from what this model has seen: {self.split_count} of its {self.words} words "
            f"({100 * self.split_share:.0f} %) are not whole pieces of its vocabulary ({shown}), a sign that "
            f"they were rare in its training text. Expect a poor {what}."
        )


def familiarity(tokenizer: tokenizing.Tokenizer, text: str) -> Familiarity:
    """How many of the words of ``text`` ``tokenizer`` cuts into pieces (:func:`word_pieces`).

    A word that opens a sentence counts as cut only if its lower-case form is cut too: "Weather" at the start of
    "Weather changes fast." is two pieces because capitalised "Weather" is rarer than "weather", which is grammar,
    not a rare word."""
    counted = word_pieces(tokenizer, text)
    text = unicodedata.normalize("NFC", text or "")
    openers = {m.end() for m in _SENTENCE_START.finditer(text)}
    starts = [m.start() for m in _WORD.finditer(text)]
    cut = [
        w
        for (w, n), at in zip(counted, starts, strict=True)
        if n > 1 and not (at in openers and w[:1].isupper() and len(tokenizer.encode(w.lower()).ids) == 1)
    ]
    times = Counter(cut)  # in text order, each word once
    return Familiarity(len(counted), tuple(times), len(cut), tuple(times.values()))
